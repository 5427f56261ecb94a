"""A virtual cluster on one Linux machine: hosts are network namespaces, NICs are veth links
to bridges in a switch namespace. Used by cluster/vcluster and scripts/inject; see
docs/CLUSTER.md."""
