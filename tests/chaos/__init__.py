"""The fault-injection rig: histories, the linearizability checker, network
faults, nemeses, the workload and campaigns (bench/chaos.py runs long ones)."""
