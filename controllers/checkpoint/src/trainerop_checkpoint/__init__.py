"""The checkpoint controller: checkpoint state machine, quorum, retention, resume."""
