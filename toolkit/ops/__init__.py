"""Operations at scale: Kubernetes and Slurm layouts, speculative-decoding metrics, deployment health.

Modules import their optional dependencies (prometheus-client, kubernetes-validate) lazily, so that
`import toolkit.ops.k8s` works with the core install.
"""
