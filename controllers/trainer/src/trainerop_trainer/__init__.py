"""The trainer controller: turns a Trainer into pods and keeps them healthy (docs/trainer.md)."""
