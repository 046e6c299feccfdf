"""The node-side files the toolkit uploads: ``install_k8s_cluster.sh`` (the contract of
Tacker's sample script, TACKER.md §1.5) and ``create_admin_token.yaml`` (the VIM's
service-account token Secret). Shipped as package data and read with
:mod:`importlib.resources`, so an installed wheel or image carries them."""
