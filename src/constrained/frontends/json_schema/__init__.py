"""JSON Schema → a dialect pattern (one DFA) or a rule set (pushdown), exact or refused with path and reason."""
