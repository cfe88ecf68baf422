"""A two-node Ray cluster on 127.0.0.1, for tests/runtime/test_ray_two_nodes.py:
``python ray_cluster.py`` prints ``ADDRESS NODE_ID`` (the head's GCS address and the second node's
id) and keeps the cluster up until its stdin closes.

The head offers no CPU, so every actor that asks for one (the rollout workers do) is placed on the
second node. Both nodes are raylets of one machine (``ray.cluster_utils.Cluster``): ``ray start
--address`` refuses a second node whose address is loopback."""

import os
import sys

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # every Ray server on the node address, 127.0.0.1

from ray.cluster_utils import Cluster  # noqa: E402

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                        "node_ip_address": "127.0.0.1"})
node = cluster.add_node(num_cpus=2, node_ip_address="127.0.0.1")
cluster.wait_for_nodes()
print(cluster.address, node.node_id, flush=True)
sys.stdin.read()
cluster.shutdown()
