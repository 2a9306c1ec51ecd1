"""Model weights for training pods: a source (``hf://org/name@revision``) fetched once per revision
into a shared cache and checked file by file against the hashes its source lists
(docs/design/trusted-artifacts.md, decision 4)."""
