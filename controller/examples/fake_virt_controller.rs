//! Runs the TEST DOUBLE of KubeVirt's virt-controller (`tests/fake_virt_controller`) as a
//! process, for `scripts/demo.sh`: no KubeVirt runs there either. It reaches kube-apiserver
//! through its own kube-api-rewriter at the URL given (KubeVirt's names only).
//!
//! Usage: `fake_virt_controller http://127.0.0.1:PORT`

#[path = "../tests/fake_virt_controller/mod.rs"]
#[allow(dead_code)]
mod fake_virt_controller;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let url = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("usage: fake_virt_controller http://127.0.0.1:PORT"))?;
    virtualization_controller::install_crypto_provider();
    let mut config = kube::Config::new(url.parse()?);
    config.default_retry = false;
    let client = kube::Client::try_from(config)?;
    println!(
        "fake virt-controller (a test double standing in for KubeVirt's) watching kubevirt.io VMs through {url}"
    );
    fake_virt_controller::run(client).await;
    Ok(())
}
