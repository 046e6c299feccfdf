"""A simulated OpenStack (Keystone, Heat, Glance, Nova) for the ``tacker`` test tier.

See :mod:`tests.testbed.openstack_sim.app` for what it simulates and what it leaves out.
"""

from .app import Fault, OpenStackSim, SimConfig, vim_connection_info
from .control import SimControl

__all__ = ["Fault", "OpenStackSim", "SimConfig", "SimControl", "vim_connection_info"]
