"""Backends: from TIR with tile ops to a loadable artifact for one target family."""
