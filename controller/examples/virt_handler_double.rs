//! Runs the TEST DOUBLE of KubeVirt's virt-handler (`tests/virt_handler_double`) as a process,
//! for `scripts/demo.sh`: virt-handler needs a hypervisor, which does not run there. It reaches
//! kube-apiserver through a kube-api-rewriter at the URL given (KubeVirt's names only), as
//! kubevirt-handler: `scripts/kubevirt.sh` starts that sidecar (`VIRT_HANDLER_SIDECAR_PORT`).
//!
//! Usage: `virt_handler_double http://127.0.0.1:PORT`

#[path = "../tests/virt_handler_double/mod.rs"]
mod virt_handler_double;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let url = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: virt_handler_double http://127.0.0.1:PORT"))?;
    virtualization_controller::install_crypto_provider();
    let mut config = kube::Config::new(url.parse()?);
    config.default_retry = false;
    let client = kube::Client::try_from(config)?;
    println!(
        "virt-handler double (a test double standing in for KubeVirt's) watching kubevirt.io VMIs through {url}"
    );
    virt_handler_double::run(client).await;
    Ok(())
}
