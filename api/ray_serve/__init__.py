"""embedgate as a Ray Serve application: replicas of the gateway, each with its own
tritonserver, reading one shared model repository.

The set of loaded models is the application's desired state, kept in the ingress
deployment's ``user_config``; every replica's ``reconfigure()`` makes its own Triton
match it. Ray is imported only here, and only when this mode is used.
"""
