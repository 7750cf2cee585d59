//! What the controller's end-to-end tests and its benchmark share (included by path from
//! `tests/e2e/` and `benches/`).

/// A VM's manifest: 1 core at 50%, cloud-init userData, a nodeSelector and a toleration.
pub fn vm_yaml(ns: &str, name: &str, run_policy: &str, memory: &str) -> String {
    format!(
        r#"apiVersion: virtualization.deckhouse.io/v1alpha2
kind: VirtualMachine
metadata:
  name: {name}
  namespace: {ns}
  labels: {{app: shop}}
spec:
  runPolicy: {run_policy}
  cpu: {{cores: 1, coreFraction: "50%"}}
  memory: {{size: {memory}}}
  provisioning:
    userData: |
      #cloud-config
      hostname: {name}
  nodeSelector: {{disk: ssd}}
  tolerations: [{{key: dedicated, operator: Exists, effect: NoSchedule}}]
"#
    )
}

/// A kube-rs client of a rewriter sidecar on loopback `port`, made on `rt`: as the controller's,
/// with no client-side retries of 503s (its watches back off instead).
pub fn sidecar_client(rt: &tokio::runtime::Runtime, port: u16) -> kube::Client {
    let url = format!("http://127.0.0.1:{port}").parse().expect("url");
    let _guard = rt.enter();
    let mut config = kube::Config::new(url);
    config.default_retry = false;
    kube::Client::try_from(config).expect("client")
}

/// A runtime for the doubles and the cases' kube-rs clients, with the controller's crypto
/// provider installed.
pub fn runtime() -> tokio::runtime::Runtime {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    virtualization_controller::install_crypto_provider();
    rt
}

/// A kube-rs client with the credentials of `kubeconfig` (admin's, straight to
/// kube-apiserver), made on `rt`.
#[allow(dead_code)]
pub fn admin_client(rt: &tokio::runtime::Runtime, kubeconfig: impl AsRef<std::path::Path>) -> kube::Client {
    rt.block_on(async {
        let kc = kube::config::Kubeconfig::read_from(kubeconfig.as_ref()).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("kubeconfig");
        kube::Client::try_from(config).expect("client")
    })
}
