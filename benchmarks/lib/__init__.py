"""What the benchmark scripts share; each script in benchmarks/ is one experiment and imports
only from here (and infinipipe), never from another script.

- results: where results and pages live, reading and writing results JSON, MIB
- markdown: a table's head, the machine a page names
- plan_tool: running build/infinipipe-plan, its command line, reading its rows (setting_text)
- simulated_case: one case summarised per method, and its first step drawn as a timeline
- timeline_plot: Chrome traces drawn as pipeline timelines
- cluster_tables, cluster_target: the cluster study's page (tables, notes, the target)
- measured_report: the measured comparison's part of docs/benchmarks.md
- validation: the simulator validation's errors
- training, ranks: what the torchrun experiments share (the trainer and batches; the ranks)
- peers, torch_pipelining, torch_packed, peer_layers: the measured comparison's peers
"""
