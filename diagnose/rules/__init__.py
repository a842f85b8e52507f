"""The rule language: model, loading, parsing, condition kinds, predicates as data, the cache."""
