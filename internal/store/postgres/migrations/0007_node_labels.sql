-- 0007_node_labels: the labels a node's inventory gives it (gpu.model,
-- gpu.count, cpu.count, numa.nodes, memory.totalGiB), kept apart from the
-- labels of its join token and its operator so that a report never
-- overwrites what a person set, nor a person what the hardware says.
ALTER TABLE nodes ADD COLUMN inventory_labels jsonb NOT NULL DEFAULT '{}';
