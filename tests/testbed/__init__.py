"""The test bed: real parts the integration tiers (and the demo) start and stop.

* :mod:`tests.testbed.tacker_bed`   the real OpenStack Tacker 16.0.0 (``tacker`` tier, demo)
* :mod:`tests.testbed.testhosts`    real sshd hosts in network namespaces (``ssh``, ``k8s``)
* :mod:`tests.testbed.kafka_broker` a throwaway Kafka-protocol broker (``kafka`` tier, bench)
* :mod:`tests.testbed.k8s_standin`  stand-in ``kubeadm``/``kubectl`` for the ``ssh`` tier

Each module is stdlib-only and also runs from the command line, as a module from the
repository root (``python3 -m tests.testbed.tacker_bed start ...``) or by file path.
The simulated OpenStack stays in :mod:`tests.openstack_sim`.
"""
