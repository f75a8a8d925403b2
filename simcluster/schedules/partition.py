"""Split a model's transformer layers over the pipeline's virtual stages, in model order."""

from __future__ import annotations

from simcluster.errors import UserError
from simcluster.frameworks.stacks import MEGATRON_CORE_STACKS

FIELD = "parallel.layers_per_stage"


def layers_per_stage(
    layers: int, p: int, v: int = 1, explicit: list[int] | None = None
) -> list[int]:
    """Layers of each of the V = p*v virtual stages (model order), as the frameworks do.

    Evenly when V divides ``layers``; else, when V divides ``layers + 2``, the first and last
    virtual stage (which also hold the embedding and the LM head) get one fewer (Llama 3 405B:
    126 layers on 16 stages -> 7, 14 x 8, 7; Zero Bubble paper: "the first and last stage have
    one fewer transformer layer"; with one layer per virtual stage those two hold only the
    embedding and the head); else the remainder goes to middle stages, spread evenly.
    ``explicit`` overrides the rule and must have V entries summing to ``layers``, positive
    except the first and last, which may be 0: a virtual stage of only the embedding, or only
    the LM head with its loss and MTP modules (Megatron-Core's ``pipeline_model_parallel_layout``
    "E|...|L"; Megatron-Bridge runs DeepSeek-V3 as "Et|(tt|)*30mL").
    """
    n = p * v
    if explicit is not None:
        ends_ok = all(int(x) == x and x >= 0 for x in (explicit[:1] + explicit[-1:]))
        middle_ok = all(int(x) == x and x >= 1 for x in explicit[1:-1])
        if len(explicit) != n or not (ends_ok and middle_ok) or (n == 1 and explicit[0] < 1):
            raise UserError(
                FIELD,
                f"needs {n} layer counts (one per virtual stage, pp*vpp), positive except the "
                f"first and last (0 = only the embedding / only the head), got {explicit}; "
                f"give {n} counts, or drop it for the default split",
            )
        if sum(explicit) != layers:
            raise UserError(
                FIELD,
                f"sums to {sum(explicit)} but the model has {layers} layers; make them add up",
            )
        return [int(x) for x in explicit]
    if n >= 3 and layers % n and (layers + 2) % n == 0:
        # the embedding and the LM head count as one layer each (Megatron's
        # account-for-embedding/loss split; the Zero Bubble fork's one layer per virtual stage)
        per = (layers + 2) // n
        return [per - 1] + [per] * (n - 2) + [per - 1]
    if layers < n:
        raise UserError(FIELD, f"{layers} layers cannot fill {n} virtual stages; lower pp or vpp")
    if layers % n == 0:
        return [layers // n] * n
    base, extra = divmod(layers, n)
    counts = [base] * n
    middle = list(range(1, n - 1))
    if extra > len(middle):
        # only when extra == n - 1, i.e. layers + 1 divide: the LM-head stage keeps one fewer,
        # Megatron's --account-for-loss-in-pipeline-split alone. With the embedding's flag alone
        # Megatron shorts the first stage instead (get_num_layers_to_build): a scenario says so
        # with parallel.embedding_in_split (megatron_accounted), or writes the split out
        middle = list(range(0, n - 1))
    for k in range(extra):
        counts[middle[(2 * k + 1) * len(middle) // (2 * extra)]] += 1
    return counts


def megatron_vpp(layers: int, pp: int, per_virtual: int, extra: int, field: str) -> int:
    """Virtual stages per pipeline rank from the layers each holds (Megatron's
    --num-layers-per-virtual-pipeline-stage) as ``training/arguments.py`` ``validate_args``
    derives it: the layers plus ``extra`` (one each for --account-for-embedding/loss-in-pipeline-
    split) must divide by pp ("number of layers of the model must be divisible pipeline model
    parallel size") and a rank's share by ``per_virtual``; vpp = rank's share / ``per_virtual``.
    ``field`` is the name the error gives (the scenario's field or the importer's flag)."""
    total = layers + extra
    counted = f" (+{extra} for the embedding/loss) = {total}" if extra else ""
    if total % pp:
        raise UserError(field, f"the model's {layers} layers{counted} do not divide over pp={pp} stages (Megatron asserts it)")
    per_rank = total // pp
    if per_rank % per_virtual:
        raise UserError(
            field, f"{per_virtual} does not divide the {per_rank} layers of each of pp={pp} stages{counted and ' (counted)'}"
        )
    return per_rank // per_virtual


def megatron_accounted(layers: int, pp: int, vpp: int, embedding: bool, loss: bool, field: str) -> list[int]:
    """Layers of the pp*vpp virtual stages (model order) with the embedding and/or the loss
    counted as a layer (Megatron-Core's --account-for-embedding/loss-in-pipeline-split):
    ``transformer_block.get_num_layers_to_build`` gives each rank (layers + embedding + loss) / pp
    and each of its chunks that / vpp, asserting both divide, then builds one fewer on the first
    virtual stage in model order for the embedding (pipeline rank 0's first chunk) and on the
    last for the loss (the last rank's last chunk); ``transformer_layer
    .get_transformer_layer_offset`` moves every later chunk's first layer back by one."""
    total = layers + embedding + loss
    if total % pp or (total // pp) % vpp:
        raise UserError(
            field,
            f"{layers} layers + embedding/loss = {total} do not split evenly over pp {pp}"
            f"{f' x vpp {vpp}' if vpp > 1 else ''} (Megatron asserts it)",
        )
    stages = [total // (pp * vpp)] * (pp * vpp)
    stages[0] -= embedding
    stages[-1] -= loss
    return stages


def megatron_first_last(layers: int, pp: int, vpp: int, first: int | None, last: int | None, field: str) -> list[int]:
    """Layers of the pp*vpp virtual stages (model order) under Megatron-Core's
    --decoder-first/last-pipeline-num-layers: the first / last rank holds the given layers, the
    middle ranks split the rest evenly, and each rank's layers split evenly over its vpp chunks
    (``transformer_block.get_num_layers_to_build``; ``TransformerConfig.__post_init__`` raises
    unless the first's, the last's and each middle rank's layers divide by vpp). Chunk c of rank
    r is virtual stage c*pp + r: ``transformer_layer.get_transformer_layer_offset`` puts it at
    c*(first + middle + last per chunk) + the chunks of the ranks before it.

    Refused as Megatron-Core's ``TransformerConfig.__post_init__`` refuses them (NVIDIA/Megatron-LM
    002526d, megatron/core/transformer/transformer_config.py; older copies of that block lack
    the middle-rank check): a first or last rank of no layers ("num_layers_in_first_pipeline_stage
    must be larger than 0") and middle ranks left without layers, or layers left without middle
    ranks ("Mismatch: {num_layers} middle layers remaining but {pipeline_parallel_size} middle
    PP stages available"); ``layers_per_stage`` would refuse the empty middle stage only later,
    naming the scenario's field instead of the flags."""
    flags = "--decoder-first/last-pipeline-num-layers"
    for edge, given in (("first", first), ("last", last)):
        if given is not None and given <= 0:
            raise UserError(
                f"--decoder-{edge}-pipeline-num-layers",
                f"{given} layers: Megatron-Core requires more than 0 (TransformerConfig: "
                f"\"num_layers_in_{edge}_pipeline_stage must be larger than 0\"); give at least 1",
            )
    middle = pp - (first is not None) - (last is not None)
    rest = layers - (first or 0) - (last or 0)
    fix = f"make first + last at most {layers - middle}" if middle else f"make first + last = {layers}"
    if rest < 0:
        raise UserError(field, f"{flags} give {layers - rest} layers, more than the model's {layers}; {fix}")
    if bool(rest) != bool(middle):
        raise UserError(
            field,
            f"{flags} leave {rest} of the {layers} layers for {middle} middle pipeline ranks, which "
            f"Megatron-Core refuses (TransformerConfig: \"Mismatch: {rest} middle layers remaining but "
            f"{middle} middle PP stages available\"); {fix}, or change --pipeline-model-parallel-size",
        )
    if middle > 0 and rest % middle:
        raise UserError(field, f"the other {rest} layers do not split evenly over {middle} stages (Megatron asserts it)")
    per = rest // middle if middle > 0 else 0
    ranks = [per] * pp
    if first is not None:
        ranks[0] = first
    if last is not None:
        ranks[-1] = last
    if vpp > 1 and any(n % vpp for n in ranks):
        raise UserError(
            field,
            f"the pipeline ranks' layers {ranks} do not each divide over vpp {vpp} chunks "
            "(Megatron-Core's TransformerConfig raises it)",
        )
    return [ranks[r] // vpp for _ in range(vpp) for r in range(pp)]


#: frameworks whose interleaved schedule is Megatron's, with the layers each may add to the split:
#: Megatron-Core (and NeMo and Megatron-Bridge, which run it) counts the embedding and the loss
#: as a layer each under --account-for-embedding/loss-in-pipeline-split; Megatron-LM of 2021
#: had neither flag. None: no framework named, the interleaved schedule is Megatron's.
MEGATRON_INTERLEAVED: dict[str | None, tuple[int, ...]] = {
    **dict.fromkeys([None, *sorted(MEGATRON_CORE_STACKS)], (0, 1, 2)),
    "megatron-lm-2021": (0,),
}


def _divides(layers: int, extras: tuple[int, ...], stages: int) -> bool:
    """Whether the layers, plus one of ``extras`` (the embedding and/or loss counted), divide
    over ``stages``."""
    return any((layers + k) % stages == 0 for k in extras)


def _counted(extras: tuple[int, ...]) -> str:
    return " (also with the embedding and loss counted as layers)" if max(extras) else ""


def _use(option: str, values: list[int]) -> str:
    """The fix naming the values of ``option`` that would do ('use vpp 2 or 4, '), if any."""
    return f"use {option} {' or '.join(map(str, values))}, " if values else ""


def check_megatron_virtual_split(layers: int, pp: int, vpp: int, framework: str | None) -> None:
    """Refuse virtual stages that Megatron cannot build: its interleaved schedule needs the layers
    (plus the embedding and/or loss when accounted for) to divide over pp ranks and then over vpp
    chunks per rank, i.e. by pp*vpp (Megatron-Core ``transformer_block.get_num_layers_to_build``:
    ``num_layers % pipeline_model_parallel_size == 0`` and ``num_layers_per_pipeline_rank %
    vp_size == 0``; ``training/arguments.py`` asserts the same for
    --num-layers-per-virtual-pipeline-stage, and Megatron-LM 2021's ``validate_args`` without the
    embedding/loss terms). What ``layers_per_stage`` leaves to the middle stages is not what
    Megatron does; an uneven split is written out as ``parallel.layers_per_stage`` (its
    ``pipeline_model_parallel_layout``)."""
    extras = MEGATRON_INTERLEAVED.get(framework)
    n = pp * vpp
    if extras is None or vpp <= 1 or _divides(layers, extras, n):
        return
    fits = [v for v in range(2, (layers + max(extras)) // pp + 1) if _divides(layers, extras, pp * v)]
    raise UserError(
        "parallel.vpp",
        f"the model's {layers} layers do not divide over pp*vpp = {pp}*{vpp} = {n} virtual stages"
        f"{_counted(extras)}, which Megatron's interleaved schedule requires; {_use('vpp', fits[:4])}"
        f"or list the {n} stages' layers in "
        "parallel.layers_per_stage (Megatron-Core's pipeline_model_parallel_layout)",
    )


#: Megatron-family frameworks whose interleaved schedule asserts a pipeline of more than two
#: ranks unless pipeline sends and receives overlap (Megatron-LM 2021 had no such overlap). The
#: Zero Bubble fork (sail-sg/zero-bubble-pipeline-parallelism megatron/training/arguments.py
#: validate_args) asserts the same for --num-layers-per-virtual-pipeline-stage (its interleaved
#: and interleaved zero-bubble schedules); its ZB-V sets its two chunks itself after that check
#: (megatron/core/zbpp_utils.py validate_arguments: virtual_pipeline_model_parallel_size = 2,
#: pp > 1 only), and the V schedules take no parallel.vpp, so pp = 2 stays open to them
MEGATRON_RANKS = MEGATRON_CORE_STACKS | {"megatron-lm-2021", "zero-bubble"}


def check_interleaved_ranks(pp: int, vpp: int, framework: str | None, pp_comm: bool) -> None:
    """Refuse virtual stages on a pipeline too short for them.

    One rank (pp = 1) has no pipeline to interleave chunks over, in any framework: Megatron-Core
    ``parallel_state.initialize_model_parallel`` raises "pipeline-model-parallel size should be
    greater than 1 with interleaved schedule" (NVIDIA/Megatron-LM commit 00caa53) and
    ``training/arguments.py`` ``validate_args`` asserts pp > 1 at the least; torchtitan pipelines
    only when pp > 1 (``ParallelDims.pp_enabled``), leaving its schedule unused.

    Two ranks (pp = 2) by release, for the Megatron family:

    - Megatron-LM 2021 (``megatron/arguments.py`` ``validate_args`` with
      --num-layers-per-virtual-pipeline-stage): pp > 2, "pipeline-model-parallel size should be
      greater than 2 with interleaved schedule". Refused.
    - Megatron-Core's ``training/arguments.py`` ``validate_args`` since --overlap-p2p-communication
      came (NVIDIA/Megatron-LM commit 000c4ac): pp > 1 with ``overlap_p2p_comm``, pp > 2
      without ("to avoid having multiple p2p sends and recvs between same 2 ranks per
      communication batch"); the overlap is on by default since the flag became
      --no-overlap-p2p-communication. simcluster's ``overlap.pp_comm`` is that flag (the
      megatron-core, nemo and megatron-bridge presets set it): refused when it is false. The Zero Bubble fork's
      ``validate_args`` keeps this rule and its preset turns the overlap off (its example
      script's --no-overlap-p2p-communication): interleaving on two ranks is refused there
      unless ``overlap.pp_comm`` is set.
    - Megatron-Core releases whose ``parallel_state.initialize_model_parallel`` still raised for
      pp <= 2 whatever the overlap (core v0.7.0's copy; relaxed to pp > 1 by commit 152c562,
      NVIDIA/Megatron-LM issue #750, June 2024) refused pp = 2 too. The first release carrying
      the fix is not dated here, so a scenario naming an older ``framework_release`` is not
      refused for it.

    Frameworks outside the family (and a scenario naming none) are held to pp > 1 only.
    """
    if vpp <= 1:
        return
    if pp <= 1:
        raise UserError(
            "parallel.vpp",
            f"vpp={vpp} interleaves chunks over pipeline ranks, but pp={pp} is a single rank with nothing "
            "to interleave (Megatron asserts pp > 1); set parallel.vpp: 1, or pp >= 2",
        )
    if pp > 2 or framework not in MEGATRON_RANKS:
        return
    if framework == "megatron-lm-2021":
        raise UserError(
            "parallel.vpp",
            f"megatron-lm-2021 needs pp > 2 with an interleaved schedule (validate_args: \"pipeline-model-"
            f"parallel size should be greater than 2\"), got pp={pp}; set parallel.vpp: 1, or pp >= 3",
        )
    if not pp_comm:
        raise UserError(
            "parallel.vpp",
            f"{framework} needs pp > 2 with an interleaved schedule unless pipeline sends and receives "
            f"overlap (validate_args without --overlap-p2p-communication), got pp={pp}; set "
            "overlap.pp_comm: true, parallel.vpp: 1, or pp >= 3",
        )


#: frameworks that build their pipeline stages with Megatron's layer split (no framework named
#: is not one of them: it claims no framework's checks), with the layers each may add to it
MEGATRON_PIPELINE: dict[str, tuple[int, ...]] = {k: v for k, v in MEGATRON_INTERLEAVED.items() if k is not None}


def check_megatron_pipeline_split(layers: int, pp: int, framework: str | None, pp_room: int = 0) -> None:
    """Refuse a pipeline of one chunk per stage that a Megatron-family framework cannot build:
    without an uneven split (``parallel.layers_per_stage``: Megatron-Core's
    --decoder-first/last-pipeline-num-layers or --pipeline-model-parallel-layout) it asserts
    ``num_layers % pipeline_model_parallel_size == 0``, with the embedding and/or the loss
    counted as a layer each under --account-for-embedding/loss-in-pipeline-split
    (Megatron-Core ``transformer_block.get_num_layers_to_build``: "num_layers should be
    divisible by pipeline_model_parallel_size"; Megatron-LM 2021 ``model/transformer.py``
    ``ParallelTransformer.__init__``: "num_layers must be divisible by
    pipeline_model_parallel_size", no such flags). ``layers_per_stage`` would otherwise give
    the remainder to middle stages, a split Megatron never runs. The pp degrees suggested
    divide ``pp_room`` (the GPUs over tp*cp, so that dp stays whole) when it is given."""
    extras = MEGATRON_PIPELINE.get(framework or "")
    if extras is None or pp <= 1 or _divides(layers, extras, pp):
        return
    room = range(2, layers + max(extras) + 1)
    fits = [q for q in room if _divides(layers, extras, q) and (pp_room <= 0 or pp_room % q == 0)]
    near = sorted(sorted(fits, key=lambda q: (abs(q - pp), q))[:3])
    raise UserError(
        "parallel.pp",
        f"{framework} needs the model's {layers} layers to divide over pp={pp} stages{_counted(extras)}; "
        f"{_use('pp', near)}or list the {pp} stages' layers in parallel.layers_per_stage (Megatron's "
        "--decoder-first/last-pipeline-num-layers)",
    )


def cost_balanced(layers: int, n: int, layer_cost: int, head_cost: int) -> list[int]:
    """Layers of each of ``n`` stages as nanotron assigns its pipeline blocks (``build_model`` in
    ``models/base.py``): walking the blocks in model order with their cumulative cost, each block
    goes to the current rank, which is left once the cumulative cost exceeds
    ``total * (rank + 1) / n``; the embedding costs nothing and the LM head (``head_cost``) ends
    the walk on the last rank. Costs are integers, as nanotron's ``get_block_compute_costs``."""
    total = layers * layer_cost + head_cost
    thresholds = [total * ((r + 1) / n) for r in range(n)]
    counts, rank, cumulative = [0] * n, 0, 0
    for _ in range(layers):
        counts[rank] += 1
        cumulative += layer_cost
        if cumulative > thresholds[rank]:
            rank += 1
            if rank == n:
                break
    if rank != n - 1 or sum(counts) != layers:
        raise UserError(
            "parallel.partition",
            f"nanotron's cost-balanced split of {layers} layers and the LM head over {n} stages leaves "
            f"a stage empty ({counts}); lower pp or use partition: megatron",
        )
    return counts
