"""QA templates: a small placeholder language, YAML template files, and columnar rendering.

Template language (the whole of it):

- literal text, with ``{{`` and ``}}`` for literal braces;
- ``{field}`` or ``{field:spec}`` where ``field`` is one of the fields the question type declares
  (``generator.qa.fields``); nothing else (no attribute access, indexing, calls, conversions or
  expressions: ``{__import__}``, ``{a.b}``, ``{a[0]}``, ``{x!r}`` are refused when the file loads);
- spec for quantity fields: ``.Nf`` with 0 <= N <= 6 decimals (default ``cfg.qa.decimals``); the unit is
  always printed after the number (``{distance_m:.1f}`` -> ``12.3 m``);
- spec for text fields: ``upper``, ``lower`` or ``capitalize``.

A template file (YAML, one per family by convention)::

    family: ego_spatial          # a registered family (generator.qa.families)
    replace: false               # optional: true drops every earlier template of this family first
    templates:
      - id: ego_spatial.distance.plain     # unique; a later file with the same id replaces it
        type: distance                     # a question type of the family
        question: "How far is {region} from the ego vehicle?"
        answer: "{region} is {distance_m} away."

Files are read in order: the built-in folder, then each of ``cfg.qa.template_dirs`` (``*.yaml``/``*.yml``
sorted by name). Rendering never evaluates anything: placeholders select precomputed Arrow string
columns, which are joined with the literal pieces by ``pyarrow.compute.binary_join_element_wise``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from generator.qa.families import question_types
from generator.qa.fields import QuestionType
from schemas.families import families
from schemas.errors import InputError
from schemas.files import file_problem

BUILTIN_DIR = Path(__file__).resolve().parent / "templates"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_QTY_SPEC = re.compile(r"^\.([0-6])f$")
TEXT_SPECS = ("upper", "lower", "capitalize")
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|\{|\}")
_TEMPLATE_KEYS = {"id", "type", "question", "answer"}
_FILE_KEYS = {"family", "replace", "templates"}


class TemplateError(InputError):
    """A template file is malformed or a template uses something it may not; names file, line and field."""

    def __init__(self, message: str, *, file: str | Path, line: int | None = None, field_name: str | None = None):
        self.line = line
        self.field = field_name
        loc = f"{file}:{line}" if line else str(file)
        super().__init__(f"{loc}: {message}", file=str(file), stage="qa")


@dataclass(frozen=True)
class Placeholder:
    name: str
    spec: str | None


@dataclass(frozen=True)
class Template:
    id: str
    family: str
    type: str
    question: tuple  # parts: str literals and Placeholder
    answer: tuple
    file: str
    line: int
    question_text: str = ""
    answer_text: str = ""


@dataclass
class TemplateSet:
    """Templates by (family, question type), each list sorted by id (so variant choice is stable)."""

    by_type: dict[tuple[str, str], list[Template]] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    def variants(self, family: str, qtype: str) -> list[Template]:
        return self.by_type.get((family, qtype), [])

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_type.values())

    def ids(self) -> list[str]:
        return sorted(t.id for v in self.by_type.values() for t in v)


def parse_template_text(text: str, qt: QuestionType, *, file: str, line_of, tid: str, role: str) -> tuple:
    """Split a template string into literal and Placeholder parts, validating each placeholder against
    the question type. ``line_of(pos)`` maps a character offset in ``text`` to a file line."""
    parts: list = []
    lit: list[str] = []
    pos = 0
    for m in _TOKEN.finditer(text):
        lit.append(text[pos:m.start()])
        pos = m.end()
        tok = m.group(0)
        if tok == "{{":
            lit.append("{")
            continue
        if tok == "}}":
            lit.append("}")
            continue
        if m.group(1) is None:
            raise TemplateError(f"template '{tid}' {role}: unbalanced '{tok}' (write '{tok}{tok}' for a literal brace)",
                                file=file, line=line_of(m.start()))
        body = m.group(1).strip()
        name, _, spec = body.partition(":")
        name = name.strip()
        spec = spec.strip() or None
        where = dict(file=file, line=line_of(m.start()), field_name=name)
        fdef = qt.field(name) if _NAME.match(name) else None
        if fdef is None:
            raise TemplateError(
                f"template '{tid}' {role} uses unknown field '{name}' (placeholder '{{{body}}}'); question type "
                f"{qt.family}/{qt.name} declares: {', '.join(qt.field_names)}", **where)
        if role == "question" and fdef.answer:
            raise TemplateError(f"template '{tid}' question uses answer field '{name}' (it would give the answer "
                                "away)", **where)
        if spec is not None:
            ok = bool(_QTY_SPEC.match(spec)) if fdef.kind == "quantity" else spec in TEXT_SPECS
            if not ok:
                allowed = "'.Nf' with N in 0..6" if fdef.kind == "quantity" else ", ".join(TEXT_SPECS)
                raise TemplateError(f"template '{tid}' {role}: field '{name}' has unsupported format '{spec}' "
                                    f"(allowed: {allowed})", **where)
        if lit:
            s = "".join(lit)
            if s:
                parts.append(s)
            lit = []
        parts.append(Placeholder(name, spec))
    lit.append(text[pos:])
    s = "".join(lit)
    if s:
        parts.append(s)
    return tuple(parts)


def _line_mapper(node: yaml.ScalarNode, text: str):
    """Map a character offset in a scalar's value to its (1-based) file line."""
    base = node.start_mark.line + 1
    if node.style in ("|", ">"):
        base += 1  # the content starts on the line after the block indicator
        return lambda pos: base + text.count("\n", 0, pos)
    return lambda pos: base


MAX_TEMPLATE_BYTES = 1 << 20  # a file of templates is a few kB


def _compose(path: Path):
    problem = file_problem(path)  # a FIFO would block the read forever
    if problem is None and path.stat().st_size > MAX_TEMPLATE_BYTES:
        problem = f"{path.stat().st_size:,} bytes, larger than any template file ({MAX_TEMPLATE_BYTES:,} at most)"
    if problem:
        raise TemplateError(f"cannot read template file: it is {problem}", file=path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise TemplateError(f"cannot read template file: {err}", file=path) from None
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark else None
        raise TemplateError(f"not valid YAML: {err.problem or err}", file=path, line=line) from None
    except yaml.YAMLError as err:
        raise TemplateError(f"not valid YAML: {err}", file=path) from None


def _mapping(node, path, what) -> dict[str, tuple]:
    """A YAML mapping node -> {key: (key_node, value_node)}, refusing duplicate or non-string keys."""
    if not isinstance(node, yaml.MappingNode):
        raise TemplateError(f"{what} must be a mapping", file=path, line=node.start_mark.line + 1)
    out: dict[str, tuple] = {}
    for k, v in node.value:
        if not isinstance(k, yaml.ScalarNode) or k.tag != "tag:yaml.org,2002:str":
            raise TemplateError(f"{what}: keys must be strings", file=path, line=k.start_mark.line + 1)
        if k.value in out:
            raise TemplateError(f"{what}: duplicate key '{k.value}'", file=path, line=k.start_mark.line + 1,
                                field_name=k.value)
        out[k.value] = (k, v)
    return out


def _string(node, path, what, key) -> str:
    if not isinstance(node, yaml.ScalarNode) or node.tag not in ("tag:yaml.org,2002:str",):
        raise TemplateError(f"{what}: '{key}' must be a string", file=path, line=node.start_mark.line + 1,
                            field_name=key)
    return node.value


def load_template_file(path: str | Path, types: dict[tuple[str, str], QuestionType] | None = None
                       ) -> tuple[str, bool, list[Template]]:
    """Parse one template file -> (family, replace, templates) against the question types ``types``
    (default: the registered families'). Raises TemplateError naming file/line/field."""
    QUESTION_TYPES = types if types is not None else question_types()
    FAMILIES = list(dict.fromkeys(f for f, _ in QUESTION_TYPES))
    path = Path(path)
    root = _compose(path)
    if root is None:
        raise TemplateError("empty template file", file=path, line=1)
    top = _mapping(root, path, "template file")
    for key, (knode, _v) in top.items():
        if key not in _FILE_KEYS:
            raise TemplateError(f"unknown top-level key '{key}' (allowed: {', '.join(sorted(_FILE_KEYS))})",
                                file=path, line=knode.start_mark.line + 1, field_name=key)
    if "family" not in top:
        raise TemplateError("missing 'family'", file=path, line=root.start_mark.line + 1, field_name="family")
    fnode = top["family"][1]
    family = _string(fnode, path, "template file", "family")
    if family not in FAMILIES:
        raise TemplateError(f"unknown family '{family}' (known: {', '.join(FAMILIES)})", file=path,
                            line=fnode.start_mark.line + 1, field_name="family")
    replace = False
    if "replace" in top:
        rnode = top["replace"][1]
        if not (isinstance(rnode, yaml.ScalarNode) and rnode.tag == "tag:yaml.org,2002:bool"):
            raise TemplateError("'replace' must be true or false", file=path, line=rnode.start_mark.line + 1,
                                field_name="replace")
        replace = rnode.value.lower() in ("true", "yes", "on")
    if "templates" not in top:
        raise TemplateError("missing 'templates' list", file=path, line=root.start_mark.line + 1,
                            field_name="templates")
    seq = top["templates"][1]
    if not isinstance(seq, yaml.SequenceNode):
        raise TemplateError("'templates' must be a list", file=path, line=seq.start_mark.line + 1,
                            field_name="templates")
    out: list[Template] = []
    seen: dict[str, int] = {}
    for item in seq.value:
        line = item.start_mark.line + 1
        m = _mapping(item, path, "template")
        for key, (knode, _v) in m.items():
            if key not in _TEMPLATE_KEYS:
                raise TemplateError(f"template: unknown key '{key}' (allowed: {', '.join(sorted(_TEMPLATE_KEYS))})",
                                    file=path, line=knode.start_mark.line + 1, field_name=key)
        for key in ("id", "type", "question", "answer"):
            if key not in m:
                raise TemplateError(f"template: missing '{key}'", file=path, line=line, field_name=key)
        tid = _string(m["id"][1], path, "template", "id")
        if tid in seen:
            raise TemplateError(f"duplicate template id '{tid}' (first at line {seen[tid]})", file=path,
                                line=m["id"][1].start_mark.line + 1, field_name="id")
        seen[tid] = m["id"][1].start_mark.line + 1
        tnode = m["type"][1]
        qtype = _string(tnode, path, f"template '{tid}'", "type")
        qt = QUESTION_TYPES.get((family, qtype))
        if qt is None:
            known = sorted(t for f, t in QUESTION_TYPES if f == family)
            raise TemplateError(f"template '{tid}': unknown question type '{qtype}' for family {family} "
                                f"(known: {', '.join(known)})", file=path, line=tnode.start_mark.line + 1,
                                field_name="type")
        texts = {}
        for role in ("question", "answer"):
            node = m[role][1]
            text = _string(node, path, f"template '{tid}'", role)
            if not text.strip():
                raise TemplateError(f"template '{tid}': empty {role}", file=path, line=node.start_mark.line + 1,
                                    field_name=role)
            texts[role] = (text, parse_template_text(text, qt, file=str(path), line_of=_line_mapper(node, text),
                                                     tid=tid, role=role))
        if qt.kind == "quantitative":
            names = {p.name for p in texts["answer"][1] if isinstance(p, Placeholder)}
            if qt.value_field not in names:
                raise TemplateError(f"template '{tid}': a {qt.family}/{qt.name} answer must print its value "
                                    f"'{{{qt.value_field}}}' (the number with its unit)", file=path,
                                    line=m["answer"][1].start_mark.line + 1, field_name=qt.value_field)
        out.append(Template(id=tid, family=family, type=qtype, question=texts["question"][1],
                            answer=texts["answer"][1], file=str(path), line=line,
                            question_text=texts["question"][0], answer_text=texts["answer"][0]))
    return family, replace, out


def template_files(dirs) -> list[Path]:
    files: list[Path] = []
    for d in dirs:
        d = Path(d)
        if not d.exists():
            raise TemplateError("template folder does not exist (check qa.template_dirs or --templates)", file=d)
        if not d.is_dir():  # a file (or something that is none: refused by name when it is read)
            files.append(d)
            continue
        # every YAML name but a folder's: a FIFO or a broken link named *.yaml is refused by name, never skipped
        files.extend(sorted(p for p in d.iterdir() if p.suffix in (".yaml", ".yml") and not p.is_dir()))
    return files


def load_templates(cfg=None, extra_dirs=()) -> TemplateSet:
    """The built-in templates (each registered paper family's ``template_dirs``, in family order), then
    ``cfg.qa.template_dirs`` and ``extra_dirs`` in order (files or folders).

    A template whose id was seen before replaces it; a file with ``replace: true`` first drops every
    template of its family loaded so far. Raises TemplateError (file, line, field) on the first bad file.
    """
    dirs = [BUILTIN_DIR] + [Path(d) for fam in families().values() for d in fam.template_dirs()]
    if cfg is not None:
        dirs += [Path(d) for d in cfg.qa.template_dirs]
    dirs += [Path(d) for d in extra_dirs]
    by_id: dict[str, Template] = {}
    files = template_files(dirs)
    for path in files:
        family, replace, templates = load_template_file(path)
        if replace:
            by_id = {k: t for k, t in by_id.items() if t.family != family}
        for t in templates:
            prev = by_id.get(t.id)
            if prev is not None and (prev.family, prev.type) != (t.family, t.type):
                raise TemplateError(f"template '{t.id}' replaces one of type {prev.family}/{prev.type} "
                                    f"({prev.file}:{prev.line}) with type {t.family}/{t.type}; use a new id",
                                    file=path, line=t.line, field_name="id")
            by_id[t.id] = t
    ts = TemplateSet(files=[str(f) for f in files])
    for t in sorted(by_id.values(), key=lambda t: t.id):
        ts.by_type.setdefault((t.family, t.type), []).append(t)
    return ts
