"""The test bed: the real parts and stand-ins that the tests, ``scripts/demo.py`` and
``bench/`` start and drive. Not shipped in the wheel; it never imports ``tests``.

* :mod:`tests.testbed.tacker_bed`    the real OpenStack Tacker 16.0.0 (``tacker`` tier, demo)
* :mod:`tests.testbed.tacker_api`    Tacker's v2 LCM API as its user calls it, a callback recorder
* :mod:`tests.testbed.serve`         ``lccn-subscriber serve`` as a subprocess (tests, bench)
* :mod:`tests.testbed.tacker_serve`  ``serve`` subscribed to the bed's Tacker, its cluster settings
* :mod:`tests.testbed.tacker_driver` Tacker's own v2 management-driver script on the hosts
* :mod:`tests.testbed.cnf`           the sample CNF (VNF-B): its package and v1/v2 requests
* :mod:`tests.testbed.openstack_sim` the simulated OpenStack (Keystone, Heat, Nova, Cinder)
* :mod:`tests.testbed.testhosts`     real sshd hosts in network namespaces (``ssh``, ``k8s``, bench)
* :mod:`tests.testbed.kafka_broker`  a throwaway Kafka-protocol broker (``kafka`` tier, bench)
* :mod:`tests.testbed.records`       the notifications put on its topics (``kafka`` tier, bench)
* :mod:`tests.testbed.k8s_standin`   stand-in ``kubeadm``/``kubectl`` for the ``ssh`` tier
* :mod:`tests.testbed.cluster_vnf`   an in-memory Tacker and OpenStack serving one cluster VNF
* :mod:`tests.testbed.prometheus`    a throwaway Prometheus and promtool (``prometheus`` tier)

The bed's own processes (Tacker, the hosts, the broker, the stand-ins) are stdlib-only
modules that also run from the command line, as a module from the repository root
(``python3 -m tests.testbed.tacker_bed start ...``) or by file path.
"""
