"""The profile controller: TrainingProfile resolution and merging."""
