"""User-facing errors.

Every bad input (a scenario field, a CLI argument, a hardware profile) raises
:class:`UserError`. The CLI prints ``error: <field>: <message>`` on one line and exits
with status 2, never a traceback. A fault of the simulator itself that it can name (a step
whose ranks wait for each other for ever) raises :class:`InternalError`: one line and status 3,
the traceback only with ``SIMCLUSTER_DEBUG=1``.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path


def one_line(exc: BaseException) -> str:
    """An error's message with its newlines and runs of spaces folded, as the CLI prints it."""
    return " ".join(str(exc).split())


class UserError(Exception):
    """A bad input, explained in one line that names the field and the fix."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        # args are the constructor's own, so the error rebuilds from them: SimPy re-raises a
        # process's exception as ``type(exc)(*exc.args)`` and pickle (sweep's worker
        # processes) does the same; one formatted string there made either a TypeError
        super().__init__(field, message)

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message

    def one_line(self) -> str:
        """The message as printed by the CLI (newlines folded)."""
        return one_line(self)


class InternalError(RuntimeError):
    """A simulation the engine could not finish: its bug, not the input's (to be reported with
    the scenario). A sweep or validate run lists it against its layout or case and goes on."""


#: the environment variable that lets an InternalError's traceback through the CLI
DEBUG_ENV = "SIMCLUSTER_DEBUG"


# What users coming from a framework's flags or a Hugging Face config type for one of our keys
# without meaning exactly it (a hint only; exact equivalents are read as the key itself:
# simcluster/key_aliases.py)
FRAMEWORK_NAMES: dict[str, str] = {
    "virtual_stages": "vpp",
    "max_position_embeddings": "seq_len",
    "activation_checkpointing": "recompute",
    "moe_expert_capacity_factor": "capacity_factor",
    "moe_pad_expert_input_to_capacity": "pad_to_capacity",
    "moe_token_dispatcher_type": "dispatcher",
    # Megatron-LM's --recompute-activations (selective) and --recompute-method (uniform/block
    # of full recomputation); its 2019 --model-parallel-size (tensor parallelism before
    # pipelining); torchtitan's local_batch_size (per rank, split further by pipelining) and
    # data_parallel_shard_degree (FSDP's group, 1 meaning none); a table's "interleave"
    "recompute_activations": "recompute",
    "recompute_method": "recompute",
    "model_parallel": "tp",
    "model_parallel_size": "tp",
    "local_batch_size": "micro_batch",
    "data_parallel_shard_degree": "zero",
    "dp_shard": "zero",
    "interleave": "vpp",
}


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """A ' (did you mean X?)' hint, or '' when nothing is close: a framework's name for one of
    ``choices`` (:data:`FRAMEWORK_NAMES`, or an alias of a key in another section: Megatron's
    ``micro_batch_size`` written under ``parallel:``) or a spelling neighbour."""
    from simcluster.key_aliases import ANY_SECTION  # key_aliases raises UserError: import here

    options = list(choices)
    spelled = name.lower().lstrip("-").replace("-", "_")
    alias = FRAMEWORK_NAMES.get(spelled) or ANY_SECTION.get(spelled)
    if alias in options:
        return f" (did you mean '{alias}'?)"
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def did_you_mean_choice(got: object, expected: str) -> str:
    """:func:`did_you_mean` for a choice field's value: ``expected`` lists the choices quoted,
    as pydantic's literal error gives them ("'fp32', 'bf16' or 'fp16'")."""
    return did_you_mean(str(got), re.findall(r"'([^']*)'", expected))


def read_text(path: str | Path, field: str, what: str = "file") -> str:
    """The text of a user-given file; unreadable or non-UTF-8 bytes are a one-line UserError
    naming ``field`` (a scenario, profile, cases file, log or trace, never a traceback)."""
    path = Path(path)
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(
            field,
            f"{what} '{path}' is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
            f"{exc.start}); give a text file saved as UTF-8",
        ) from None
    except IsADirectoryError:
        raise UserError(field, f"{what} '{path}' is a directory; give the {what} file in it") from None
    except FileNotFoundError:
        raise UserError(field, f"{what} '{path}' not found; check the path") from None
    except OSError as exc:
        raise UserError(field, f"cannot read {what} '{path}': {exc.strerror or exc}; give a file you can read") from None


def exit_code_of(action: Callable[[], int | None]) -> int:
    """Run a command body; a UserError becomes one line on stderr and status 2, an
    InternalError one line and status 3 (its traceback with ``SIMCLUSTER_DEBUG=1``), ^C
    status 130."""
    try:
        return int(action() or 0)
    except UserError as exc:
        print(f"error: {exc.one_line()}", file=sys.stderr)
        return 2
    except InternalError as exc:
        if os.environ.get(DEBUG_ENV):
            raise
        print(
            f"error: internal: {one_line(exc)} (a simcluster bug, not your input: "
            f"please report it with the scenario; {DEBUG_ENV}=1 shows the traceback)",
            file=sys.stderr,
        )
        return 3
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
