"""LCM operation user data of the Kubernetes cluster package (v1 API).

Tacker's v1 OpenStack driver imports this module from the package and calls
``KubernetesClusterUserData.instantiate`` with the BaseHOT (the top template under
``heat_template``, each nested one under its file name), the flavour's VNFD, the
instantiate request and the grant. It returns the top template's parameters: ``nfv``
with each VDU's flavor (the VNFD's requested_additional_capability_name) and each
external CP's network (the request's extVirtualLinks). The groups' sizes come from
the template's ``<aspect>_desired_capacity`` parameters, which Tacker sets itself.

It runs inside Tacker's conductor, with Tacker's helpers for user data.
"""

from tacker.vnfm.lcm_user_data import utils as user_data
from tacker.vnfm.lcm_user_data.abstract_user_data import AbstractUserData


class KubernetesClusterUserData(AbstractUserData):
    @staticmethod
    def instantiate(base_hot_dict=None, vnfd_dict=None, inst_req_info=None, grant_info=None):
        wanted = user_data.create_initial_param_server_port_dict(base_hot_dict)
        flavors = user_data.create_vdu_flavor_capability_name_dict(vnfd_dict)
        networks = {
            cp: {"network": network}
            for cp, network in user_data.create_cpd_vl_dict(base_hot_dict, inst_req_info).items()
        }
        params = user_data.create_final_param_dict(wanted, flavors, {}, networks)
        for vdu in params["nfv"]["VDU"].values():
            vdu.pop("image", None)  # the nested templates' default image
        return params
