"""The trainer controller: turns a Trainer into pods and keeps them healthy (DESIGN §3, §5, §6)."""
