"""The pass protocol, the records a pass returns, and the driver that applies passes.

A pass declares patterns and a `check` that turns a match into a `Site` (fuse) or a `NearMiss`
(explain why not). The driver, not the pass, decides what may be removed: it collects every match
first, puts every site through one final check whatever pass built it (`checked_site`:
`final_check.py`), rejects matches whose intermediates escape the subgraph, keeps the largest
acceptable candidate per site, then rewires all chosen sites at once, keeping each output tensor's
name, and cleans up and sorts the graph once. Passes run in order until none fuses anything.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import onnx_graphsurgeon as gs

from normfuse.facts.constants import DEFAULT_DOMAINS
from normfuse.facts.facts import ScopeFacts
from normfuse.ir.graph_import import scopes as graph_scopes
from normfuse.match import final_check
from normfuse.match.context import Context
from normfuse.match.final_check import check_attribute_values
from normfuse.match.pattern import Match, Pattern, match_first, root_ops
from normfuse.match.records import (
    INTERMEDIATE_USED_ELSEWHERE,
    NearMiss,
    Reject,
    Site,
    node_label,
)
from normfuse.rewrite.emit import NameRegistry, apply_sites, output_moves

SHAPE_CONFLICT = "shape-conflict"
CHECK_FAILED = "check-failed"
MAX_ROUNDS = 8


class FusionPass(Protocol):
    """A family of patterns that fuse into one op."""

    name: str
    kind: str
    patterns: tuple[Pattern, ...]
    # Bindings whose nodes may also feed nodes outside the match, and then stay (an input Cast).
    # A pass may also declare `never_outputs`: shared bindings that may not be graph outputs.
    shared_names: tuple[str, ...]

    def site_key(self, match: Match) -> gs.Node:
        """The node that identifies the candidate site (matches sharing it compete)."""

    def check(self, match: Match, context: Context) -> Site | None:
        """Decide, without side effects, whether `match` computes this family's function: a
        `Site`, or raise `Reject` with the reason. None means the match belongs to another family,
        whose pass reports it."""


@dataclass
class RunResult:
    """What the driver fused and declined, over all rounds."""

    sites: list[Site] = field(default_factory=list)
    near_misses: list[NearMiss] = field(default_factory=list)


def run(
    graph: gs.Graph,
    passes: Sequence[FusionPass],
    context: Context,
    function_contexts: dict[tuple[str, str], Context] | None = None,
) -> RunResult:
    """Apply `passes` to `graph`, the bodies of its If/Loop/Scan nodes and its model-local
    functions (each with its own context) until nothing more fuses; the graph is changed in
    place."""
    scopes = []
    for scope, function in graph_scopes(graph):
        if function is None:
            scopes.append((scope, context, None))
            continue
        key = (function.domain, function.name)
        function_context = (function_contexts or {}).get(key)
        if function_context is not None:
            scopes.append((scope, function_context, key))
    names = NameRegistry([scope for scope, _, _ in scopes])
    shared = SharedMatches(passes)
    result = RunResult()
    # A later round rescans a (pass, scope) only if some scope changed since that pass last
    # scanned it (scopes share outer tensors, so any rewrite counts); otherwise its verdicts are
    # those of that scan: no sites (it applied none, or a change would have been counted) and the
    # same near-misses.
    changes = 0
    last_scan: dict[tuple[int, int], tuple[int, list[NearMiss]]] = {}
    for _ in range(MAX_ROUNDS):
        fused_this_round = 0
        near_misses: list[NearMiss] = []
        for pass_index, fusion_pass in enumerate(passes):
            for scope_index, (scope, scope_context, function) in enumerate(scopes):
                seen, misses = last_scan.get((pass_index, scope_index), (-1, []))
                if seen != changes:
                    sites, misses = find_sites(scope, fusion_pass, scope_context, shared)
                    last_scan[(pass_index, scope_index)] = (changes, misses)
                    sites = [replace(site, function=function) for site in sites]
                    apply_sites(scope, sites, names, scope_context.facts)
                    result.sites.extend(sites)
                    fused_this_round += len(sites)
                    changes += bool(sites)
                    if sites:
                        shared.forget()
                near_misses.extend(misses)
        result.near_misses = near_misses
        if not fused_this_round:
            break
    return result


def find_sites(
    graph: gs.Graph,
    fusion_pass: FusionPass,
    context: Context,
    shared: SharedMatches | None = None,
) -> tuple[list[Site], list[NearMiss]]:
    """Every site `fusion_pass` would fuse in `graph` (non-overlapping) and every near-miss.
    A match is a subgraph of `graph` itself: one reaching into an enclosing scope's nodes is not
    a candidate here (it belongs to no single scope's rewrite). `shared` holds the matches of
    patterns another pass also has, found since the graph last changed."""
    context.facts.forget()  # static values derived before a rewrite are not reused after it
    shared = shared or SharedMatches([fusion_pass])
    candidates: dict[int, list[Match]] = {}
    in_scope = {id(node) for node in graph.nodes}
    roots = _RootIndex(fusion_pass.patterns)
    for node in graph.nodes:
        for tensor, pattern in roots.candidates(node):
            found = shared.first(pattern, tensor, context.facts)
            if found is not None and all(id(n) in in_scope for n in found.nodes):
                key = id(fusion_pass.site_key(found))
                candidates.setdefault(key, []).append(found)
    graph_outputs = {tensor.name for tensor in graph.outputs}
    by_node: dict[int, list[Match]] = {}  # each node's candidates, in collection order
    for group in candidates.values():
        for found in group:
            for node in found.nodes:
                by_node.setdefault(id(node), []).append(found)
    sites, near_misses = [], []
    for group in candidates.values():
        outcome = _decide(group, fusion_pass, context, graph_outputs, by_node)
        if isinstance(outcome, Site):
            sites.append(outcome)
        elif outcome is not None:
            near_misses.append(outcome)
    return _without_overlaps(sites, graph), near_misses


class SharedMatches:
    """`match_first` of the patterns that more than one pass has (the same objects: the
    group-norm and layer-norm statistics), remembered by tensor until `forget`: while the graph
    is unchanged a match is a function of the graph and the scope's constants (read once, never
    changed by a rewrite), so the second pass takes the first one's."""

    def __init__(self, passes: Sequence[FusionPass]) -> None:
        owners: dict[int, tuple[Pattern, set[int]]] = {}  # by identity: patterns are held
        for index, fusion_pass in enumerate(passes):
            for pattern in fusion_pass.patterns:
                owners.setdefault(id(pattern), (pattern, set()))[1].add(index)
        self._shared = {key: pattern for key, (pattern, found) in owners.items() if len(found) > 1}
        self._found: dict[tuple[int, int, int], tuple[gs.Tensor, Match | None]] = {}

    def first(self, pattern: Pattern, tensor: gs.Tensor, facts: ScopeFacts) -> Match | None:
        """`match_first(pattern, tensor, facts)`, remembered where `pattern` is shared."""
        if id(pattern) not in self._shared:
            return match_first(pattern, tensor, facts)
        key = (id(pattern), id(tensor), id(facts))
        entry = self._found.get(key)
        if entry is not None and entry[0] is tensor:  # the tensor is held: its id is its own
            return entry[1]
        found = match_first(pattern, tensor, facts)
        self._found[key] = (tensor, found)
        return found

    def forget(self) -> None:
        """Drop every remembered match: the graph has changed."""
        self._found.clear()


class _RootIndex:
    """Which (tensor, pattern) pairs of a node can match at all: a pattern rooted at an `Op`
    matches only the first output of a default-domain node of that type, so the matcher is
    tried only there (the same pairs in the same order as trying every pattern everywhere)."""

    def __init__(self, patterns: Sequence[Pattern]) -> None:
        self._patterns = [(pattern, root_ops(pattern)) for pattern in patterns]
        self._by_op: dict[tuple[str, bool], list[tuple[Pattern, bool]]] = {}

    def candidates(self, node: gs.Node) -> Iterator[tuple[gs.Tensor, Pattern]]:
        """The (tensor, pattern) pairs of `node`'s outputs worth matching, in pattern order."""
        default = node.domain in DEFAULT_DOMAINS
        table = self._by_op.get((node.op, default))
        if table is None:
            table = [
                (pattern, ops is not None)
                for pattern, ops in self._patterns
                if ops is None or (default and node.op in ops)
            ]
            self._by_op[(node.op, default)] = table
        for index, tensor in enumerate(node.outputs):
            for pattern, op_rooted in table:
                if index == 0 or not op_rooted:
                    yield tensor, pattern


def _decide(
    group: list[Match],
    fusion_pass: FusionPass,
    context: Context,
    graph_outputs: set[str],
    by_node: dict[int, list[Match]],
) -> Site | NearMiss | None:
    """The largest acceptable candidate; a smaller one only where a larger one's intermediates
    escape the subgraph (unless they escape only into a partner: `_partner`). Otherwise the
    largest candidate's near-miss."""
    group = sorted(group, key=lambda found: len(found.nodes), reverse=True)
    first_miss = None
    for found in group:
        try:
            outcome = checked_site(fusion_pass, found, context)
        except Reject as reject:
            label = node_label(fusion_pass.site_key(found))
            outcome = NearMiss(fusion_pass.kind, label, reject.reason, reject.detail)
        except Exception as error:  # a check that trips over an odd graph never fuses it
            label = node_label(fusion_pass.site_key(found))
            detail = f"the check could not decide: {type(error).__name__}: {error}"
            outcome = NearMiss(fusion_pass.kind, label, CHECK_FAILED, detail)
        if isinstance(outcome, Site):
            escape = _escaping_intermediate(found, fusion_pass, graph_outputs, outcome)
            if escape is not None and not _partner(
                found, fusion_pass, context, graph_outputs, by_node
            ):
                outcome = escape
        if isinstance(outcome, Site):
            moves = output_moves(outcome.fused, found.root, graph_outputs, context)
            end = moves[-1].outputs[0] if moves else None
            fused = replace(outcome.fused, output_moves=moves, moved_output=end)
            outcome = replace(outcome, root=found.root, fused=fused)
        excluded = context.policy.excluded
        if isinstance(outcome, Site) and outcome.output in excluded:
            return NearMiss(outcome.kind, outcome.output, *excluded[outcome.output])
        if isinstance(outcome, Site):
            outcome = _timed_form(outcome, node_label(fusion_pass.site_key(found)), context)
        if outcome is None or isinstance(outcome, Site):
            return outcome
        first_miss = first_miss or outcome
        if outcome.reason != INTERMEDIATE_USED_ELSEWHERE:
            break
    return first_miss


def _timed_form(site: Site, label: str, context: Context) -> Site | NearMiss:
    """Policy, after every check has passed: a site whose form only a timing can choose
    (`FormQuestion`) is kept where `--tune-for` is off or the fused form wins on its provider;
    otherwise it stays decomposed with the decision's reason."""
    question, chooser = site.form_question, context.policy.form_chooser
    if question is None or chooser is None:
        return site
    choice = chooser.choose(
        question.family,
        question.shape,
        question.elem_type,
        question.bias,
        question.tensors,
        context.facts,
    )
    if choice.use_skip:
        return site
    detail = choice.detail(site.op, question.replaced_op)
    return NearMiss(site.kind, label, choice.reason(), detail)


def checked_site(fusion_pass: FusionPass, found: Match, context: Context) -> Site | None:
    """The pass's verdict on `found`, then the one final-check path every site goes through,
    whatever pass built it: the scope's facts, then the fused node against its op's kernel
    contract and the replaced output (`final_check`). Raises `Reject`."""
    outcome = fusion_pass.check(found, context)
    if isinstance(outcome, Site):
        _check_scope_facts(found, context)
        unfit = final_check.problem(outcome, found, context)
        if unfit is not None:
            raise Reject(*unfit)
    return outcome


def _check_scope_facts(found: Match, context: Context) -> None:
    """Facts every check relies on: matched nodes hold attribute values, not references to a
    function's attributes (resolved only per call); no touched tensor carries a declared type
    that inference contradicts."""
    for node in found.nodes:
        check_attribute_values(node)
    touched = {t.name for node in found.nodes for t in [*node.inputs, *node.outputs]}
    conflicted = sorted(touched & context.facts.conflicts)
    if conflicted:
        raise Reject(
            SHAPE_CONFLICT,
            f"the declared type of {conflicted[0]!r} contradicts the type inference derives",
        )


def _escapes(
    found: Match, fusion_pass: FusionPass, graph_outputs: set[str], provided: frozenset[int]
) -> Iterator[tuple[gs.Tensor, list[gs.Node]]]:
    """Each intermediate of `found` (not the root, not a shared binding) that is a graph output
    or read outside the match, with those outside readers; first, each shared binding the pass
    never lets be a graph output (`never_outputs`) that is one and not in `provided` (ids of the
    tensors the fused node produces)."""
    for name in getattr(fusion_pass, "never_outputs", ()):
        tensor = found.tensors.get(name)
        if tensor is not None and tensor.name in graph_outputs and id(tensor) not in provided:
            yield tensor, []
    inside = {id(node) for node in found.nodes}
    shared = {id(found[name]) for name in fusion_pass.shared_names if name in found}
    for node in found.nodes:
        for tensor in node.outputs:
            if tensor is found.root or id(tensor) in shared:
                continue
            outside = [user for user in tensor.outputs if id(user) not in inside]
            if outside or tensor.name in graph_outputs:
                yield tensor, outside


def _escaping_intermediate(
    found: Match, fusion_pass: FusionPass, graph_outputs: set[str], site: Site
) -> NearMiss | None:
    """A near-miss if a matched node's output other than the root (or a shared binding) is used
    outside the match, or a shared binding the fused node cannot provide is a graph output."""
    provided = frozenset(id(tensor) for _, tensor in site.fused.extra_outputs)
    for tensor, outside in _escapes(found, fusion_pass, graph_outputs, provided):
        users = ", ".join(node_label(user) for user in outside) or "a graph output"
        node = tensor.inputs[0]
        label = node_label(node)
        detail = f"{tensor.name!r} (from {node.op} {label!r}) is also used by {users}"
        return NearMiss(fusion_pass.kind, label, INTERMEDIATE_USED_ELSEWHERE, detail)
    return None


def _outside_users(
    found: Match, fusion_pass: FusionPass, graph_outputs: set[str]
) -> list[gs.Node] | None:
    """The nodes outside `found` that read its intermediates; None when an intermediate (or a
    shared binding the pass never provides) is a graph output."""
    users = []
    for tensor, outside in _escapes(found, fusion_pass, graph_outputs, frozenset()):
        if tensor.name in graph_outputs:
            return None
        users += outside
    return users


def _partner(
    found: Match,
    fusion_pass: FusionPass,
    context: Context,
    graph_outputs: set[str],
    by_node: dict[int, list[Match]],
) -> bool:
    """True when `found`'s intermediates escape only into other candidates of the same pass
    that read the same x, are each exactly a site, and whose own intermediates escape only into
    `found` or one another: norms sharing statistics (one `x - mean`, one variance; two, three
    or more). `found` is fused now; the shared nodes stay for the others, which fuse in later
    rounds, and then they die."""
    users = _outside_users(found, fusion_pass, graph_outputs)
    if not users or "x" not in found:
        return False
    covered = {id(node) for node in found.nodes}
    verdicts: dict[int, bool] = {}

    def is_partner(other: Match) -> bool:
        if id(other) not in verdicts:
            verdicts[id(other)] = (
                other is not found
                and "x" in other
                and other["x"] is found["x"]
                and _exactly_a_site(other, fusion_pass, context)
            )
        return verdicts[id(other)]

    pending = list(users)
    while pending:
        user = pending.pop()
        if id(user) in covered:
            continue
        candidates = by_node.get(id(user), [])
        partner = next((o for o in candidates if is_partner(o)), None)
        back = None if partner is None else _outside_users(partner, fusion_pass, graph_outputs)
        if back is None:
            return False
        covered |= {id(node) for node in partner.nodes}
        pending += back
    return True


def _exactly_a_site(found: Match, fusion_pass: FusionPass, context: Context) -> bool:
    try:
        outcome = checked_site(fusion_pass, found, context)
    except Exception:  # not a norm (a Reject), or a check that trips: no partner
        return False
    return isinstance(outcome, Site)


def _without_overlaps(sites: list[Site], graph: gs.Graph) -> list[Site]:
    """Keep the largest sites first; drop any that shares a node with one already kept."""
    taken: set[int] = set()
    kept = []
    for site in sorted(sites, key=lambda s: len(s.node_ids), reverse=True):
        if taken.isdisjoint(site.node_ids):
            taken.update(site.node_ids)
            kept.append(site)
    order = {tensor.name: index for index, tensor in enumerate(_all_outputs(graph))}
    return sorted(kept, key=lambda site: order[site.output])


def _all_outputs(graph: gs.Graph) -> list[gs.Tensor]:
    return [tensor for node in graph.nodes for tensor in node.outputs]
