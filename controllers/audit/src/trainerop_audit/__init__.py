"""The audit controller: immutable audit records and their forwarding."""
