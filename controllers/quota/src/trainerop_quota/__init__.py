"""The quota controller: spot-aware quota negotiation and admission."""
