//! Runs the TEST DOUBLE of KubeVirt's virt-handler (`tests/virt_handler_double`) as a process,
//! for `scripts/demo.sh`: virt-handler needs a hypervisor, which does not run there. It reaches
//! kube-apiserver through a kube-api-rewriter at the URL given (KubeVirt's names only), as
//! kubevirt-handler: `scripts/kubevirt.sh` starts that sidecar (`VIRT_HANDLER_SIDECAR_PORT`).
//!
//! Usage: `virt_handler_double http://127.0.0.1:PORT`. With `VIRT_HANDLER_PORT`,
//! `VIRT_HANDLER_CERT`, `VIRT_HANDLER_KEY` and `VIRT_API_CA_FILE` set (what
//! `scripts/kubevirt.sh` exports) it also serves what virt-api hands to virt-handler (freeze,
//! unfreeze) there.

#[path = "../tests/virt_handler_double/mod.rs"]
#[allow(
    dead_code,
    reason = "the controls the test cases use (refused freezes, held hot-plugs) are not the demo's"
)]
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
    let handler = std::sync::Arc::new(virt_handler_double::api::Handler::default());
    if let Ok(port) = std::env::var("VIRT_HANDLER_PORT") {
        let file = |k: &str| {
            std::env::var_os(k)
                .map(std::path::PathBuf::from)
                .ok_or_else(|| anyhow::anyhow!("{k} is not set"))
        };
        let (cert, key, ca) = (
            file("VIRT_HANDLER_CERT")?,
            file("VIRT_HANDLER_KEY")?,
            file("VIRT_API_CA_FILE")?,
        );
        let port: u16 = port.parse()?;
        let listener = virt_handler_double::api::bind(port);
        let (client, handler) = (client.clone(), handler.clone());
        tokio::spawn(async move {
            virt_handler_double::api::serve(listener, &cert, &key, &ca, client, handler).await
        });
        println!("serving virt-handler's API on 127.0.0.1:{port}");
    }
    virt_handler_double::run(client, handler).await;
    Ok(())
}
