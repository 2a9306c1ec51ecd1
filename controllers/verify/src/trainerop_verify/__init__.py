"""The verify controller: training images checked against the namespace's ImagePolicies before their pods exist."""
