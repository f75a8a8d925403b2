"""The arguments a shell launch script passes to its training program.

Launch scripts are shell, not a format: this reads the part of bash that launch scripts use to
build a command line, and no more. Statements are split on unquoted newlines, ``;`` and ``|`` (a
backslash before a newline continues the line, inside double quotes too); ``#`` starts a comment
and a here-document's body is skipped. ``a && b`` and ``a || b`` run as bash runs them:
a ``[ ]`` test decides, any other command is taken to succeed (so ``cd dir || exit 1`` does not exit),
and a test not read here (``[ -f x ]``) runs neither side. Assignments (``A=1``, ``A+=more``,
arrays ``A=( ... )`` and ``A+=( ... )``, ``export A="..."``, ``local``/``declare``) set
variables, ``$A``, ``${A}``, ``${A:-default}``, ``${A:=default}`` and ``$((arithmetic))`` expand
as bash expands them (an unset variable is empty; so is a script argument ``$1``, whose
``${1:-default}`` is the default), `` `pwd` `` and ``$(pwd)`` are the script's folder (scripts
such as Megatron-LM's sc21 ones source their neighbours from it);
``if``/``elif``/``else``/``fi`` with ``[ ]``/``[[ ]]`` string and integer tests pick a branch;
``.``/``source`` read another file; ``exit`` stops (a non-zero status in the branch taken is an
error: the script refused the case). Any other command is not run.

The arguments are those of the last command that runs a ``.py`` file (``python``, ``torchrun``,
``deepspeed`` or ``srun`` in front), or of lines that are only ``--flags`` (an arguments file);
a script that runs no Python program (it submits a job that does, like the sc21 scripts) passes
its flags in variables: then the flags of the variables it sets and never expands are read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from simcluster.errors import UserError

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ASSIGN = re.compile(rf"^({_NAME})(\+?)=(.*)$", re.S)
_SEPARATORS = ("&&", "||", ";", "|", "\n")
#: separators kept inside a statement as words of their own: a chain run with short circuits
_CHAIN = ("&&", "||")
_DECLARE = {"export", "local", "declare", "readonly", "typeset"}
#: at most this many nested ``source``s (a script sourcing itself would never end)
_MAX_DEPTH = 8


@dataclass
class ScriptArgs:
    """The words passed to the training program, and how they were found."""

    words: list[str]
    origin: str
    notes: list[str] = field(default_factory=list)
    #: the environment the program runs with, for the variables that change a run
    #: (``CUDA_LAUNCH_BLOCKING``): the script's exported variables and the ``--var`` ones, as
    #: they are when it runs the program, and the assignments written before its command
    #: (``NAME=VALUE python ...``); an assignment not exported stays the shell's
    variables: dict[str, str] = field(default_factory=dict)
    #: the ``.py`` file the script runs (empty where it runs none)
    program: str = ""


@dataclass
class _Branch:
    outer_active: bool
    taken: bool
    active: bool


class _Exit(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


@dataclass
class _State:
    variables: dict[str, str]
    folder: Path
    field_name: str
    used: set[str] = field(default_factory=set)
    #: the variables given on the command line, which the script's assignments do not replace
    given: set[str] = field(default_factory=set)
    defined: list[str] = field(default_factory=list)
    command: list[str] | None = None
    arg_lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: the variables the script exports (``export``, ``declare -x``)
    exported: set[str] = field(default_factory=set)
    #: the environment its Python command runs with (ScriptArgs.variables), once found
    environment: dict[str, str] | None = None
    #: the ``.py`` file of that command
    program: str = ""

    def environ(self, prefix: dict[str, str] | None = None) -> dict[str, str]:
        """The exported and ``--var`` variables as they are now, with a command's own
        ``prefix`` assignments."""
        names = self.exported | self.given
        return {**{n: v for n, v in self.variables.items() if n in names}, **(prefix or {})}


def _words(text: str) -> list[str]:
    """The raw words of ``text`` (statements run together)."""
    return [w for statement in _statements(text) for w in statement]


def _statements(text: str) -> list[list[str]]:
    """``text`` cut into statements of raw words (quotes kept, so expansion can honour them)."""
    splitter = _Splitter(_without_heredocs(text))
    i = 0
    while i < len(splitter.text):
        i = splitter.step(i)
    splitter.end_statement()
    return splitter.statements


@dataclass
class _Splitter:
    """The statements and words read so far from ``text``, and the word being read."""

    text: str
    statements: list[list[str]] = field(default_factory=list)
    words: list[str] = field(default_factory=list)
    word: list[str] = field(default_factory=list)
    quote: str = ""  # the quote the word is inside ("": none)

    def end_word(self) -> None:
        if self.word:
            self.words.append("".join(self.word))
            self.word.clear()

    def end_statement(self) -> None:
        self.end_word()
        if self.words:
            self.statements.append(list(self.words))
            self.words.clear()

    def step(self, i: int) -> int:
        """Read the character at ``i`` (with what it opens); return the index to read next."""
        text, ch = self.text, self.text[i]
        if ch == "\\" and i + 1 < len(text) and self.quote != "'":
            return self._escape(i)
        if self.quote:
            return self._quoted(i)
        if ch in "'\"`":
            self.quote = ch
            self.word.append(ch)
        elif ch == "(" and self.word and self.word[-1].endswith("="):
            return _array(text, i + 1, self.word)  # NAME=( words... ): an array, comments inside
        elif ch == "$" and text.startswith("$(", i):
            return self._substitution(i)
        elif ch == "#" and not self.word:
            end = text.find("\n", i)
            return len(text) if end < 0 else end
        elif ch in " \t":
            self.end_word()
        elif sep := next((s for s in _SEPARATORS if text.startswith(s, i)), None):
            return self._separator(i, sep)
        else:
            self.word.append(ch)
        return i + 1

    def _escape(self, i: int) -> int:
        """A backslash at ``i`` and the character it escapes, kept in the word; a
        backslash-newline continues the line, so both are dropped."""
        if self.text[i + 1] != "\n":
            self.word.append(self.text[i : i + 2])
        return i + 2

    def _quoted(self, i: int) -> int:
        """The character at ``i`` inside a quote, kept; the quote's own mark closes it."""
        ch = self.text[i]
        self.word.append(ch)
        if ch == self.quote:
            self.quote = ""
        return i + 1

    def _separator(self, i: int, sep: str) -> int:
        """``sep`` at ``i``: a chain (``&&``, ``||``) kept as a word of the statement it
        joins, any other separator ends the statement."""
        if sep in _CHAIN and (self.words or self.word):
            self.end_word()
            self.words.append(sep)
        else:
            self.end_statement()
        return i + len(sep)

    def _substitution(self, i: int) -> int:
        """Keep ``$( ... )`` or ``$(( ... ))`` from ``i`` whole in the word."""
        text, depth, j = self.text, 0, i + 1
        while j < len(text):
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            if depth == 0:
                break
            j += 1
        self.word.append(text[i : j + 1])
        return j + 1


def _without_heredocs(text: str) -> str:
    """``text`` without the bodies of its here-documents (``cat <<EOF > ds_config.json``, up to
    the line that is ``EOF``; ``<<-`` allows tabs before it): their lines are a command's input,
    not statements, and a body of ``--flags`` must not read as an arguments file."""
    out: list[str] = []
    delimiter, strip = "", False
    for line in text.split("\n"):
        if delimiter:
            if (line.lstrip("\t") if strip else line) == delimiter:
                delimiter = ""
            continue
        out.append(line)
        found = re.search(r"(?<!<)<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2", line)
        if found and "<<<" not in line[found.start() : found.start() + 3]:
            delimiter, strip = found.group(3), bool(found.group(1))
    if delimiter:
        raise UserError(
            "FILE", f"a here-document '<<{delimiter}' has no closing '{delimiter}' line"
        )
    return "\n".join(out)


def _array(text: str, i: int, word: list[str]) -> int:
    """Append ``( ... )`` from ``text[i:]`` (just after the opening bracket) to ``word``, its
    comments dropped and its lines joined; return the index after the closing bracket."""
    out, quote = ["("], ""
    while i < len(text):
        ch = text[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (not out or out[-1] in " \t\n("):
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        elif ch == ")":
            word.append("".join(out).replace("\\\n", " ").replace("\n", " ") + ")")
            return i + 1
        out.append(ch)
        i += 1
    raise UserError("FILE", "an array '( ...' has no closing bracket")


def _arith(expr: str, state: _State) -> str:
    """``$((expr))``: integers, variables (with or without ``$``), + - * / % and brackets."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        state.used.add(name)
        raw = state.variables.get(name, "0").strip() or "0"
        if not re.fullmatch(r"-?\d+", raw):
            raise UserError(state.field_name, f"$(({expr})): ${name} is '{raw}', not an integer")
        return raw

    text = re.sub(rf"\$\{{?({_NAME})\}}?|\b({_NAME})\b", value, expr)
    if not re.fullmatch(r"[\d\s+\-*/%()]+", text):
        raise UserError(state.field_name, f"$(({expr})) is not integer arithmetic")
    # bash's integer division truncates towards zero, as int() of a true quotient of integers
    text = re.sub(r"(\d+)\s*/\s*(\d+)", r"int(\1 / \2)", text)
    try:
        return str(int(eval(text, {"__builtins__": {}, "int": int})))  # noqa: S307 - digits and operators only
    except (ZeroDivisionError, SyntaxError):
        raise UserError(state.field_name, f"$(({expr})) cannot be evaluated ({text})") from None


def _expand(raw: str, state: _State) -> str:
    """One raw word with its quotes removed and its expansions done."""
    out: list[str] = []
    quote = ""
    i = 0
    while i < len(raw):
        ch = raw[i]
        if quote == "'":
            if ch == "'":
                quote = ""
            else:
                out.append(ch)
            i += 1
            continue
        if ch == "\\" and i + 1 < len(raw):
            out.append(raw[i + 1])
            i += 2
            continue
        if ch in "'\"" and (not quote or quote == ch):
            quote = "" if quote else ch
            i += 1
            continue
        if ch == "`":
            end = raw.find("`", i + 1)
            out.append(_substitute(raw[i + 1 : end if end > 0 else len(raw)], state))
            i = end + 1 if end > 0 else len(raw)
            continue
        if ch == "$":
            i = _dollar(raw, i, state, out)
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _closing(raw: str, start: int, token: str, state: _State) -> int:
    """Where ``token`` closes the expansion opened at ``start``; unclosed is an error."""
    end = raw.rfind(token) if token == "))" else raw.find(token, start)
    if end < start:
        raise UserError(
            state.field_name, f"'{raw}' opens an expansion it does not close ({token!r})"
        )
    return end


def _dollar(raw: str, i: int, state: _State, out: list[str]) -> int:
    if raw.startswith("$((", i):
        end = _closing(raw, i + 3, "))", state)
        out.append(_arith(raw[i + 3 : end], state))
        return end + 2
    if raw.startswith("$(", i):
        end = _closing(raw, i + 2, ")", state)
        out.append(_substitute(raw[i + 2 : end], state))
        return end + 1
    if raw.startswith("${", i):
        end = _closing(raw, i + 2, "}", state)
        # ${NAME}, ${NAME:-default}, ${ARRAY[@]} (an array's words, joined); ${1}, a script
        # argument, is not known here: empty, as an unset variable
        found = re.match(rf"({_NAME}|\d+)(?:\[[@*0]\])?(:?[-=?+]?)(.*)", raw[i + 2 : end], re.S)
        if found is None:
            return end + 1
        name, op, default = found.groups()
        state.used.add(name)
        value = state.variables.get(name, "")
        if op in (":-", "-", ":=", "=") and not value:
            value = _expand(default, state)
            if "=" in op:
                state.variables[name] = value
        out.append(value)
        return end + 1
    if raw[i + 1 : i + 2].isdigit():
        return i + 2  # $1: a script argument, not known here (empty, as an unset variable)
    match = re.match(_NAME, raw[i + 1 :])
    if not match:
        out.append("$")
        return i + 1
    state.used.add(match.group(0))
    out.append(state.variables.get(match.group(0), ""))
    return i + 1 + match.end()


def _substitute(command: str, state: _State) -> str:
    """A command substitution: only ``pwd`` (the script's folder) is known; others stay as text."""
    if command.strip() == "pwd":
        return str(state.folder)
    return f"$({command})"


def _test(words: list[str]) -> bool | None:
    """A ``[ ]`` / ``[[ ]]`` test of expanded words, or None when it is not one read here."""
    inner = [w for w in words if w not in ("[", "]", "[[", "]]")]
    if len(inner) == 2 and inner[0] in ("-z", "-n"):
        return (inner[1] == "") == (inner[0] == "-z")
    if len(inner) == 1:
        return inner[0] != ""
    if len(inner) != 3:
        return None
    left, op, right = inner
    if op in ("==", "="):
        return left == right
    if op == "!=":
        return left != right
    ints = {
        "-eq": int.__eq__,
        "-ne": int.__ne__,
        "-lt": int.__lt__,
        "-le": int.__le__,
        "-gt": int.__gt__,
        "-ge": int.__ge__,
    }
    if op in ints and re.fullmatch(r"-?\d+", left) and re.fullmatch(r"-?\d+", right):
        return bool(ints[op](int(left), int(right)))
    return None


def _links(raw: list[str]) -> list[tuple[str, list[str]]]:
    """``a && b || c`` as ``[("", a), ("&&", b), ("||", c)]``."""
    links: list[tuple[str, list[str]]] = [("", [])]
    for word in raw:
        if word in _CHAIN:
            links.append((word, []))
        else:
            links[-1][1].append(word)
    return [(op, words) for op, words in links if words]


def _condition(raw: list[str], state: _State, where: str) -> bool:
    """An ``if``'s condition: tests joined by ``&&``/``||`` (left to right, as bash groups
    them); a condition with a part that is not a test read here is taken as false, said in a
    note."""
    result: bool | None = None
    for op, words in _links([w for w in raw if w != "then"]):
        if (op == "&&" and result is False) or (op == "||" and result is True):
            continue
        result = _test([_expand(w, state) for w in words])
        if result is None:
            state.notes.append(
                f"{where}: condition '{' '.join(raw)}' not evaluated; taken as false"
            )
            return False
    return bool(result)


def _chain(raw: list[str], state: _State, where: str, depth: int) -> None:
    """A statement that is not an ``if``: its commands joined by ``&&``/``||``, a test's outcome
    deciding the next, any other command taken to succeed."""
    ok = True
    for op, words in _links(raw):
        if (op == "&&" and not ok) or (op == "||" and ok):
            continue
        if words[0] in ("[", "[[", "test"):
            result = _test([_expand(w, state) for w in words if w != "test"])
            if result is None:  # neither branch: a guard's `|| exit 1` must not stop the read
                state.notes.append(
                    f"{where}: test '{' '.join(words)}' not evaluated; what it chains to not run"
                )
                return
            ok = result
        else:
            _statement(words, state, where, depth)
            ok = True


def _branch(raw: list[str], branches: list[_Branch], state: _State, where: str, depth: int) -> bool:
    """An ``if``, ``elif``, ``else`` or ``fi`` statement: opens, turns or closes the innermost of
    the open ``branches`` (an ``else`` runs the command on its own line when taken); False, and
    nothing done, for any other statement (a stray ``elif``/``else``/``fi`` included)."""
    head = raw[0]
    if head == "if":
        active = not branches or branches[-1].active
        cond = active and _condition(raw[1:], state, where)
        branches.append(_Branch(active, cond, cond))
        return True
    if head == "elif" and branches:
        b = branches[-1]
        b.active = b.outer_active and not b.taken and _condition(raw[1:], state, where)
        b.taken = b.taken or b.active
        return True
    if head == "else" and branches:
        b = branches[-1]
        b.active = b.outer_active and not b.taken
        b.taken = True
        rest = raw[1:]
        if rest and b.active:
            _chain(rest, state, where, depth)
        return True
    if head == "fi" and branches:
        branches.pop()
        return True
    return False


def _run(text: str, state: _State, where: str, depth: int) -> None:
    branches: list[_Branch] = []
    for raw in _statements(text):
        if _branch(raw, branches, state, where, depth):
            continue
        if raw[0] == "then":
            raw = raw[1:]
            if not raw:
                continue
        if not branches or branches[-1].active:
            _chain(raw, state, where, depth)


def _statement(raw: list[str], state: _State, where: str, depth: int) -> None:
    """One simple command: a declaration, assignments, ``source``, ``exit``, a line of flags,
    or the command that runs a ``.py`` (its arguments are the launch's)."""
    words = list(raw)
    if words[0] in _DECLARE:
        _declare(words, state)
        return
    prefix = _assignments(words, state)
    if not words:
        return
    head = _expand(words[0], state)
    if head in (".", "source"):
        if len(words) > 1:
            _source(_expand(words[1], state), state, where, depth)
        return
    if head == "exit":
        status = _expand(words[1], state) if len(words) > 1 else "0"
        raise _Exit(int(status) if status.isdigit() else 1)
    if head.startswith("--"):
        state.arg_lines.extend(w for raw_word in words for w in _expand(raw_word, state).split())
        return
    expanded = _without_redirections(
        [w for raw_word in words for w in _expand(raw_word, state).split()]
    )
    for k, word in enumerate(expanded):
        if word.endswith(".py"):
            state.program = word
            state.command = expanded[k + 1 :]
            state.environment = state.environ(prefix)
            break


def _assignments(words: list[str], state: _State) -> dict[str, str]:
    """Take the leading NAME=VALUE words off ``words``: alone on the line they set the
    shell's variables; before a command they are that command's environment only (returned)."""
    prefix: dict[str, str] = {}
    while words and (match := _ASSIGN.match(words[0])):
        words.pop(0)
        if not words:
            _assign(match.group(1), match.group(3), state, append=bool(match.group(2)))
        else:
            prefix[match.group(1)] = _expand(match.group(3), state)
    return prefix


def _declare(words: list[str], state: _State) -> None:
    """``export``/``declare``/``local``/...: its assignments, and the names it exports
    (``export``, or an option with ``x``)."""
    exports = words[0] == "export" or any(w.startswith("-") and "x" in w for w in words[1:])
    for word in (w for w in words[1:] if not w.startswith("-")):
        match = _ASSIGN.match(word)
        if match:
            _assign(match.group(1), match.group(3), state, append=bool(match.group(2)))
        if exports:
            state.exported.add(match.group(1) if match else word)


def _without_redirections(words: list[str]) -> list[str]:
    """``words`` without output redirections (``2>&1``, ``> log``, ``>>log``): the shell's,
    not the program's."""
    out: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        match = re.fullmatch(r"\d*(>>?|<)(&?\S*)", word)
        if match:
            skip = not match.group(2)  # '>' alone: the file is the next word
            continue
        out.append(word)
    return out


def _assign(name: str, raw_value: str, state: _State, append: bool = False) -> None:
    if name in state.variables and name in state.given:
        return  # --var NAME=VALUE wins over the script's own value
    if raw_value.startswith("(") and raw_value.endswith(")"):
        # an array: its words, expanded one by one ("${ARRAY[@]}" gives them back joined)
        value = " ".join(_expand(w, state) for w in _words(raw_value[1:-1]))
        # A+=( ... ) adds elements: joined by a space, as "${A[@]}" gives them back
        before = state.variables.get(name, "") if append else ""
        state.variables[name] = f"{before} {value}".strip() if before else value
    else:
        value = _expand(raw_value, state)
        state.variables[name] = (state.variables.get(name, "") if append else "") + value
    if name not in state.defined:
        state.defined.append(name)


def _source(target: str, state: _State, where: str, depth: int) -> None:
    path = Path(target)
    if not path.is_absolute():
        path = state.folder / path
    if depth >= _MAX_DEPTH:
        raise UserError(
            state.field_name, f"{where}: sources files {_MAX_DEPTH} deep; is it sourcing itself?"
        )
    if not path.is_file():
        state.notes.append(f"{where}: not read: source {target} (no such file beside the script)")
        return
    _run(path.read_text(encoding="utf-8", errors="replace"), state, path.name, depth + 1)


def read_script(path: Path, variables: dict[str, str], field_name: str = "FILE") -> ScriptArgs:
    """The training program's arguments in the launch script at ``path``; ``variables`` are set
    before the script runs and keep their values (``--var MODEL_SIZE=39B``)."""
    state = _State(dict(variables), path.resolve().parent, field_name, given=set(variables))
    try:
        _run(path.read_text(encoding="utf-8", errors="replace"), state, path.name, 0)
    except _Exit as stop:
        if stop.status != 0:
            raise UserError(
                field_name,
                f"{path.name} exits with status {stop.status} in the branch its variables pick; "
                "choose its case with --var NAME=VALUE",
            ) from None
    if state.command is not None:
        return ScriptArgs(
            state.command, "the Python command it runs", state.notes, state.environment or {}, state.program
        )
    if state.arg_lines:
        return ScriptArgs(state.arg_lines, "its lines of flags", state.notes, state.environ())
    words: list[str] = []
    names: list[str] = []
    for name in state.defined:
        value = state.variables.get(name, "").split()
        if name not in state.used and any(w.startswith("--") for w in value):
            words.extend(value)
            names.append(f"${name}")
    if not words:
        raise UserError(
            field_name, f"{path.name} runs no Python program and sets no variable of --flags"
        )
    return ScriptArgs(
        words, f"the flags it sets in {', '.join(names)} (it runs no Python program)", state.notes,
        state.environ(),
    )
