"""Bytes a compiled program moves, read from its optimized HLO (scripts/loop_bytes.py).

Two counts of one compiled program:

- ``xla_bytes``: XLA's own cost analysis, "bytes accessed". It charges every kernel its whole
  operands and result: an update of one entry of a [Q] array costs 2 Q entries, a read of one
  entry Q, and a while loop's body is charged once, whatever its trip count.
- ``inplace_bytes``: the same kernels charged as a GPU runs them in place: a gather, slice or
  dynamic slice reads only the entries it takes; a scatter or dynamic-update-slice writes only
  its update into the buffer it updates (read nothing of it); every other operand and result
  is read or written whole. A while loop's body counts once, as in XLA's count (so an inner loop
  of many iterations is under-counted: keep them out of the loop being measured), a
  conditional its cheaper branch: under ``vmap`` the conditionals left are those of an
  unbatched predicate, the env's rare work (``when_due``, the interrupt of ``rollout``),
  skipped in most iterations (``branch="costlier"`` counts it).

The in-place count is a model, not a measurement: it does not see caches, and it reads the
backend's own fusion decisions (XLA:CPU fuses less than XLA:GPU). On the turn loop of
first-fit the first GPU run's timings implied 143 KB an episode an iteration at 64 nodes and
303 KB at 1,213; on the CPU backend the in-place count gave 110 and 373 KB without the rare
work, 141 and 913 KB with it (results/gpu/loop_bytes.md).
"""

from __future__ import annotations

import collections
import re

DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
               "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8}
_INSTRUCTION = re.compile(r"\s*(ROOT )?%?([\w.\-]+) = (.*?) ([a-z][\w\-]*)\((.*)$")
_COMPUTATION = re.compile(r"\n(ENTRY )?%?([\w.\-]+) (?:\([^\n]*\) )?-> [^\n]*\{\n(.*?)\n\}", re.S)
_TOUCHING = {"gather", "dynamic-slice", "slice"}  # read only the entries they take
_UPDATING = {"dynamic-update-slice": 1, "scatter": 2}  # in place: the operand holding the update
_FREE = {"parameter", "get-tuple-element", "tuple", "constant", "bitcast"}


def xla_bytes(compiled) -> float:
    """XLA's "bytes accessed" of a compiled program (a dict, or a list of one per module)."""
    cost = compiled.cost_analysis()
    costs = cost if isinstance(cost, (list, tuple)) else [cost]
    return float(sum(c.get("bytes accessed", 0.0) for c in costs))


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO shape string (a tuple's: every element's)."""
    total = 0
    for dtype, dims in re.findall(r"\b(pred|[suf]\d+|bf16)\[([\d,]*)\]", shape):
        count = 1
        for d in filter(None, dims.split(",")):
            count *= int(d)
        total += count * DTYPE_BYTES[dtype]
    return total


def _operands(rest: str) -> list[str]:
    """Operand names of an instruction: the text up to the parenthesis that closes its list."""
    depth, out = 0, []
    for ch in rest:
        if ch == "(":
            depth += 1
        elif ch == ")":
            if depth == 0:
                break
            depth -= 1
        out.append(ch)
    return re.findall(r"%([\w.\-]+)", "".join(out))


def parse(hlo: str) -> dict:
    """{computation name: (is entry, [instruction dicts: name, shape, op, operands, rest, root])}."""
    comps = {}
    for m in _COMPUTATION.finditer(hlo):
        body = []
        for line in m.group(3).split("\n"):
            x = _INSTRUCTION.match(line)
            if x:
                root, name, shape, op, rest = x.groups()
                body.append({"name": name, "shape": shape, "op": op, "operands": _operands(rest),
                             "rest": rest, "root": bool(root)})
        comps[m.group(2)] = (bool(m.group(1)), body)
    return comps


def _called(rest: str, key: str) -> str:
    return re.search(key + r"=%?([\w.\-]+)", rest).group(1)


def _fusion_bytes(body: list) -> int:
    """In-place bytes of one fused kernel from its fused computation."""
    by_name = {i["name"]: i for i in body}
    uses = collections.defaultdict(list)
    for i in body:
        for k, o in enumerate(i["operands"]):
            uses[o].append((i, k))

    def read(name):  # what the kernel reads of value ``name``
        whole, total = shape_bytes(by_name[name]["shape"]), 0
        for i, k in uses[name]:
            if i["op"] == "bitcast":
                total += read(i["name"])
            elif i["op"] in _TOUCHING and k == 0:
                total += shape_bytes(i["shape"])
            elif i["op"] in _UPDATING and k == 0:
                continue  # the buffer updated in place
            else:
                return whole
        return min(total, whole)

    reads = sum(read(i["name"]) for i in body if i["op"] == "parameter")
    root = next(i for i in body if i["root"])
    writes = 0
    for out in ([by_name[o] for o in root["operands"]] if root["op"] == "tuple" else [root]):
        while out["op"] == "bitcast":
            out = by_name[out["operands"][0]]
        update = _UPDATING.get(out["op"])
        writes += shape_bytes(by_name[out["operands"][update]]["shape"] if update else out["shape"])
    return reads + writes


def _walk(comps: dict, body: list, out: collections.Counter, label, pick=min) -> None:
    sizes = {}
    for i in body:
        sizes[i["name"]] = shape_bytes(i["shape"])
        op, rest = i["op"], i["rest"]
        if op in _FREE:
            continue
        if op == "while":
            for key in ("body", "condition"):
                _walk(comps, comps[_called(rest, key)][1], out, label, pick)
            continue
        if op == "call":
            _walk(comps, comps[_called(rest, "to_apply")][1], out, label, pick)
            continue
        if op == "conditional":
            names = re.search(r"branch_computations=\{([^}]*)\}", rest)
            names = (re.findall(r"%?([\w.\-]+)", names.group(1)) if names else
                     [_called(rest, "true_computation"), _called(rest, "false_computation")])
            branches = []
            for name in names:
                branches.append(collections.Counter())
                _walk(comps, comps[name][1], branches[-1], label, pick)
            out.update(pick(branches, key=lambda c: sum(c.values())))
            continue
        if op == "fusion":
            cost = _fusion_bytes(comps[_called(rest, "calls")][1])
        elif op in _UPDATING:  # the update read and written, the indices read
            update = _UPDATING[op]
            cost = 2 * sizes[i["operands"][update]] + sum(sizes.get(o, 0) for o in i["operands"][1:update])
        elif op in _TOUCHING:
            cost = 2 * sizes[i["name"]]
        else:
            cost = sizes[i["name"]] + sum(sizes.get(o, 0) for o in i["operands"])
        out[label(i)] += cost


def inplace_bytes(hlo: str, label=lambda instruction: instruction["op"], loop_body: bool = False,
                  branch: str = "cheaper"):
    """In-place bytes of an optimized HLO module (``compiled.as_text()``) -> Counter
    {label(instruction): bytes}. loop_body: of the body and condition of the entry
    computation's largest while loop only (a rollout's loop), not of the whole program.
    branch: which branch of a conditional counts, "cheaper" or "costlier"."""
    if branch not in ("cheaper", "costlier"):
        raise ValueError(f"inplace_bytes: branch = {branch!r} must be 'cheaper' or 'costlier'")
    pick = min if branch == "cheaper" else max
    comps = parse(hlo)
    entry = next(body for is_entry, body in comps.values() if is_entry)
    out = collections.Counter()
    if not loop_body:
        _walk(comps, entry, out, label, pick)
        return out
    loops = [i for i in entry if i["op"] == "while"]
    if not loops:
        raise ValueError("inplace_bytes: the entry computation has no while loop")
    loop = max(loops, key=lambda i: len(comps[_called(i["rest"], "body")][1]))
    for key in ("body", "condition"):
        _walk(comps, comps[_called(loop["rest"], key)][1], out, label, pick)
    return out


def source_label(hlo: str, depth: int = 2):
    """A ``label`` for ``inplace_bytes``: an instruction's innermost ``depth`` Python frames
    ("function:line < caller:line") from the module's stack-frame tables, else its opcode."""
    def table(name, pattern):
        out = {}
        start = hlo.find("\n" + name + "\n")
        if start < 0:
            return out
        for line in hlo[start + len(name) + 2:].split("\n"):
            m = re.match(pattern, line)
            if not m:
                break
            out[int(m.group(1))] = m.groups()[1:]
        return out

    files = table("FileNames", r'(\d+) "(.*)"')
    functions = table("FunctionNames", r'(\d+) "(.*)"')
    locations = table("FileLocations", r"(\d+) \{file_name_id=(\d+) function_name_id=(\d+) line=(\d+)")
    frames = table("StackFrames", r"(\d+) \{file_location_id=(\d+) parent_frame_id=(\d+)")

    def label(instruction):
        m = re.search(r"stack_frame_id=(\d+)", instruction["rest"])
        frame, names = int(m.group(1)) if m else 0, []
        while frame in frames and len(names) < depth:
            location, parent = frames[frame]
            file, function, line = locations[int(location)]
            name = functions[int(function)][0]
            if "/jaxsched/" in files[int(file)][0] and not (names and names[-1].startswith(name + ":")):
                names.append(f"{name}:{line}")  # (a function's nested frames: the innermost)
            if int(parent) == frame:
                break
            frame = int(parent)
        return " < ".join(names) or instruction["op"]

    return label
