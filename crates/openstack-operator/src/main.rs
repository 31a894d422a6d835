//! `openstack-operator`: Kubernetes-native OpenStack. `run` starts the controllers; `crds`
//! prints the CustomResourceDefinitions. The command line lives in the library
//! (`openstack_operator::cli`).

fn main() -> anyhow::Result<()> {
    openstack_operator::cli::main()
}
