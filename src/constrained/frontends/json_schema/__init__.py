"""JSON Schema → a dialect pattern (one DFA) or a rule set (pushdown), exact or refused with path and reason.

The modules, each importing only those listed before it (and `constrained.dialect`, `constrained.errors`; the
automata and the pattern parser, `constrained.fsm` and `constrained.regex`, where a language is computed):

    vocabulary   the keywords read, ignored or refused; internal keywords; ``format`` names; JSON types
    policy       options and limits several modules share; `PatternApproximates`
    depth        MAX_SCHEMA_DEPTH, checked before any recursive walk; the recursion room a compile takes
    flat_nodes   one node's keywords in canonical form (`normalize`), allOf as a structural `merge`
    rewrites     not, overlapping oneOf, if/then/else, dependencies → further allOf members
    numbers      integers and numbers between bounds, multipleOf: exact digit ranges
    strings      string bodies avoiding names; string languages computed as automata
    keys         patternProperties, the keys additionalProperties governs, propertyNames
    members      an object's optional and counted members
    walk         one compilation's state and its walk through schema nodes ($ref, combinators, levels, rules)
    compiler     the values of one flat node: enum, string, integer, number, object, array (`SchemaCompiler`)
    translate    the entry points: `schema_to_pattern`, `schema_to_rules`, `open_at_root`

Nothing is imported here: `grammar` reads `depth` on every schema compile, and the rest loads when a schema is
first translated.
"""
