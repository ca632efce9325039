"""Older-opset variants of the ONNX backend node cases, for run_node_tests.py --old-opsets.

The pinned onnx generates each node case at its newest opset. For every earlier opset at which a schema of one of
the case's ops changed (onnx.defs.get_schema(op, v).since_version), a variant of the case's model at that opset is
produced, with the same semantics, so its expected outputs are the original case's:
  - "converted": onnx.version_converter.convert_version down to that opset, from the lowest relabelled opset above
    it (below) or else the original. Graph inputs that the older op versions take as attributes (Reshape's shape,
    Slice's starts, Clip's min, ...) are first frozen into initializers from the case's data, since the converter
    can only turn constants into attributes.
  - "relabelled": the converter has no down adapter for most steps that only widened an op's types (Abs-13 -> 12,
    Add-14 -> 13, ...). There the model with its opset number lowered is taken when onnx's checker accepts it at
    that opset and the converter upgrades it back to exactly the original graph: the converter's upgrade adapters
    know every semantic change between two versions (Softmax-11 -> 13 inserts Flatten/Reshape, say), so an upgrade
    that changes nothing means the older versions mean the same for this graph.
A variant must also pass onnx's full check at its opset (the converter keeps attributes the older version lacks:
AveragePool-19's dilations at opset 11, say), and below opset 13 a Softmax/LogSoftmax/Hardmax must reduce over the
last axis, where their old 2-D coercion means what the per-axis form means: the converter misses that step (its
Softmax-13 -> 12 adapter keeps axis 0, its Hardmax-12 -> 13 adapter changes nothing).
Anything else is "not produced", counted per reason (the converter's message), never failed. A converter call
costs ~50 ms (it builds its adapter registry each time), so the cases are spread over worker processes, known
missing down adapters are remembered, and one successful upgrade check vouches for every higher relabelled opset
of the same case (its steps are a subset of the checked ones).
"""
import collections
import copy
import functools
import multiprocessing
import re
import warnings

import numpy as np
import onnx
import onnx.checker
import onnx.defs
import onnx.numpy_helper
import onnx.version_converter

DEFAULT_DOMAINS = ("", "ai.onnx")

Variant = collections.namedtuple("Variant", "name case_name opset how model data_sets rtol atol")


@functools.lru_cache(maxsize=None)
def since_versions(op):
    """The opsets at which the default-domain op's versions came in, ascending (empty for no such op)."""
    versions = []
    for opset in range(1, onnx.defs.onnx_opset_version() + 1):
        try:
            since = onnx.defs.get_schema(op, opset, "").since_version
        except onnx.defs.SchemaError:
            continue
        if since not in versions:
            versions.append(since)
    return tuple(versions)


def version_at(op, opset):
    """since_version of the op's version in effect at `opset`, or None."""
    in_effect = [v for v in since_versions(op) if v <= opset]
    return in_effect[-1] if in_effect else None


def default_opset(model):
    versions = [o.version for o in model.opset_import if o.domain in DEFAULT_DOMAINS]
    return versions[0] if versions else None


def all_nodes(graph):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from all_nodes(sub)


def default_ops(model):
    return sorted({n.op_type for n in all_nodes(model.graph) if n.domain in DEFAULT_DOMAINS})


def target_opsets(model):
    """Earlier opsets, highest first, at which one of the model's ops had another version and all its ops exist."""
    opset = default_opset(model)
    ops = default_ops(model)
    if opset is None or not ops:
        return []
    targets = set()
    for op in ops:
        current = version_at(op, opset)
        if current is not None:
            targets.update(v for v in since_versions(op) if v < current)
    return sorted((t for t in targets if all(version_at(op, t) is not None for op in ops)), reverse=True)


def with_opset(model, opset):
    m = copy.deepcopy(model)
    for o in m.opset_import:
        if o.domain in DEFAULT_DOMAINS:
            o.version = opset
    return m


def attribute_inputs(model, lowest_opset):
    """Graph inputs used only where an older version of the consuming op has no such input (it was an attribute)."""
    inputs = {i.name for i in model.graph.input}
    initialized = {t.name for t in model.graph.initializer}
    to_freeze = {}
    for node in model.graph.node:
        for pos, name in enumerate(node.input):
            if name not in inputs or name in initialized:
                continue
            schema_inputs = None
            if node.domain in DEFAULT_DOMAINS and version_at(node.op_type, lowest_opset) is not None:
                schema = onnx.defs.get_schema(node.op_type, lowest_opset, "")
                variadic = schema.inputs and schema.inputs[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic
                schema_inputs = None if variadic else len(schema.inputs)
            was_attribute = pos > 0 and schema_inputs is not None and pos >= schema_inputs
            to_freeze[name] = to_freeze.get(name, True) and was_attribute
    return [name for name, freeze in to_freeze.items() if freeze]


def frozen_source(model, data_sets, lowest_opset):
    """The model with the graph inputs attribute_inputs() names as initializers holding the case's data, and the
    data sets without them; the model as it is when there are none or the data sets disagree on a value (then it is
    not a constant of the case)."""
    names = attribute_inputs(model, lowest_opset)
    order = [i.name for i in model.graph.input]
    positions = [order.index(n) for n in names]
    values = []
    for pos in positions:
        first = np.asarray(data_sets[0][0][pos])
        if any(not np.array_equal(np.asarray(ds[0][pos]), first) for ds in data_sets[1:]):
            return model, data_sets
        values.append(first)
    if not names:
        return model, data_sets
    model = copy.deepcopy(model)
    kept = [i for i in model.graph.input if i.name not in names]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    for name, value in zip(names, values):
        model.graph.initializer.append(onnx.numpy_helper.from_array(value, name))
    data_sets = [([x for k, x in enumerate(inputs) if k not in positions], outputs) for inputs, outputs in data_sets]
    return model, data_sets


COERCING_OPS = ("Softmax", "LogSoftmax", "Hardmax")  # before 13: input coerced to 2-D at axis


def coercion_problem(model, opset):
    """Why a Softmax-family node of the variant at `opset` < 13 means other than its per-axis form, else None."""
    if opset >= 13:
        return None
    ranks = {vi.name: len(vi.type.tensor_type.shape.dim) for vi in model.graph.input
             if vi.type.tensor_type.HasField("shape")}
    for node in model.graph.node:
        if node.op_type not in COERCING_OPS or node.domain not in DEFAULT_DOMAINS:
            continue
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
        rank = ranks.get(node.input[0])
        if rank is None or axis % rank != rank - 1:
            return f"{node.op_type} below opset 13 coerces to 2-D at axis {axis}, not the per-axis form (rank {rank})"
    return None


def canonical_nodes(graph):
    out = []
    for node in graph.node:
        n = copy.deepcopy(node)
        attrs = sorted(n.attribute, key=lambda a: a.name)
        del n.attribute[:]
        n.attribute.extend(attrs)
        n.ClearField("doc_string")
        out.append(n.SerializeToString())
    return out


def short_reason(exc):
    """The converter's assertion text without its source location."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = re.sub(r"^\S+\.h:\d+: ", "", text)
    text = re.sub(r"^[\w:]+: Assertion `[^`]*` failed: ", "", text)
    return text[:160]


MISSING_ADAPTER = re.compile(r"No Adapter (?:From|To|For) (?:Current )?Version \$(\d+) for (\S+)")


class Producer:
    """Makes one case's variants (runs in a worker process; remembers the converter's missing adapters)."""

    def __init__(self):
        self.missing = set()  # (op, version) the converter has no down adapter for

    def convert_down(self, model, opset):
        source = default_opset(model)
        for op in default_ops(model):
            for v in since_versions(op):
                if opset < v <= source and (op, v) in self.missing:
                    raise RuntimeError(f"No Adapter From Version ${v} for {op}")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return onnx.version_converter.convert_version(model, opset)
        except Exception as e:  # the converter raises RuntimeError/ValueError/onnx's own types
            found = MISSING_ADAPTER.search(str(e))
            if found:
                self.missing.add((found.group(2), int(found.group(1))))
            raise

    def relabel_accepted(self, case, opset):
        """Whether onnx's checker takes the relabelled model at `opset`."""
        try:
            onnx.checker.check_model(with_opset(case.model, opset), full_check=True)
            return True
        except Exception:
            return False

    def upgrades_to_original(self, case, opset):
        try:
            up = onnx.version_converter.convert_version(with_opset(case.model, opset), default_opset(case.model))
        except Exception:
            return False
        return canonical_nodes(up.graph) == canonical_nodes(case.model.graph)

    def variants(self, case):
        """(variants, not_produced) with not_produced a list of (name, reason)."""
        targets = target_opsets(case.model)
        if not targets:
            return [], []
        relabel = [t for t in targets if self.relabel_accepted(case, t)]
        vouched = set()
        for t in sorted(relabel):  # lowest first: a check at t vouches for every higher relabelled opset
            if self.upgrades_to_original(case, t):
                vouched.update(r for r in relabel if r >= t)
                break
        made, not_made = [], []
        sources = {}  # opset of the model converted down from -> (model, data sets), inputs frozen
        for t in targets:
            name = f"{case.name}@opset{t}"
            if t in vouched and not coercion_problem(case.model, t):
                made.append(Variant(name, case.name, t, "relabelled", with_opset(case.model, t), case.data_sets,
                                    case.rtol, case.atol))
                continue
            # down from the lowest relabelled opset above t: the converter lacks the down adapters of most
            # type-only steps (Unsqueeze-13 -> 12) but has those that turn inputs back into attributes (-> 11)
            start = min((r for r in vouched if r > t and not coercion_problem(case.model, r)),
                        default=default_opset(case.model))
            if start not in sources:
                sources[start] = frozen_source(with_opset(case.model, start), case.data_sets, targets[-1])
            source, data_sets = sources[start]
            try:
                converted = self.convert_down(source, t)
                onnx.checker.check_model(converted, full_check=True)
            except Exception as e:
                not_made.append((name, short_reason(e)))
                continue
            problem = coercion_problem(converted, t)
            if problem:
                not_made.append((name, problem))
                continue
            made.append(Variant(name, case.name, t, "converted", converted, data_sets, case.rtol, case.atol))
        return made, not_made


_producer = None


def _produce(case):
    global _producer
    if _producer is None:
        _producer = Producer()
    return _producer.variants(case)


class _PlainCase:
    """The fields of a loader case that pickle (the loader's case objects hold closures)."""

    def __init__(self, case):
        self.name, self.model, self.data_sets, self.rtol, self.atol = (case.name, case.model, case.data_sets,
                                                                         case.rtol, case.atol)


def produce_all(cases, jobs):
    """All variants of `cases` (in case order) and the not-produced list, made by `jobs` worker processes."""
    plain = [_PlainCase(c) for c in cases if target_opsets(c.model)]
    if jobs <= 1:
        results = [_produce(c) for c in plain]
    else:
        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            results = pool.map(_produce, plain, chunksize=4)
    made, not_made = [], []
    for m, n in results:
        made.extend(m)
        not_made.extend(n)
    return made, not_made
