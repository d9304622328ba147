#!/bin/sh
# OpenMPI rsh agent for the multi-node layout (mpirun --mca plm_rsh_agent /sdtk/kubexec.sh):
# runs mpirun's remote daemon command in the "triton" container of the named pod through
# `kubectl exec` (the pattern of the LeaderWorkerSet TensorRT-LLM example), so that no sshd is
# needed. Needs kubectl in the image and the pods/exec RBAC rule that sdtk renders.
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done  # ssh-style options: none apply
pod="$1"
shift
exec kubectl exec -i -n "${POD_NAMESPACE:-default}" -c triton "$pod" -- /bin/sh -c "$*"
