"""The placement plugin API: ``PlacementScheduler.SuggestPlacement(WorkerContext) -> PlacementHint``
(docs/placement-plugins.md). ``v1`` holds the messages and stubs generated from
``libs/placement/proto/trainerop_placement/v1/placement.proto`` by ``hack/placement-stubs.py``."""
