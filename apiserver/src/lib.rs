//! virtualization-api: the aggregated API server for `subresources.virtualization.deckhouse.io`.
//!
//! kube-apiserver's aggregator forwards VM console, VNC, port-forward, freeze and hot-plug
//! requests here (front-proxy certificate and `X-Remote-*` identity); this server
//! authenticates them, authorizes them by SubjectAccessReview, checks the VM's phase in a watch
//! cache and calls KubeVirt's virt-api with mutual TLS as its own service account, splicing
//! upgraded streams byte for byte.

pub mod app;
pub mod authn;
pub mod authz;
pub mod discovery;
pub mod error;
pub mod flags;
pub mod openapi;
pub mod server;
pub mod status;
pub mod subresources;
pub mod virtapi;
pub mod vmcache;

use kube_api_rewriter_tls as tls;

use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

pub use error::{Error, Result};

/// Runs the server until `shutdown` completes.
pub async fn run(flags: flags::Flags, shutdown: impl Future<Output = ()>) -> Result<()> {
    tls::install_default_provider();
    let hop = flags.validate()?;
    let serving = tls::ReloadingCert::load(&flags.tls_cert_file, &flags.tls_private_key_file)?;
    serving.follow(tls::Follow::files("serving certificate"), std::future::pending())?;
    let virtapi = match hop {
        flags::Hop::Direct {
            endpoint,
            ca,
            cert,
            key,
        } => {
            let proxy_cert = tls::ReloadingCert::load(&cert, &key)?;
            proxy_cert.follow(
                tls::Follow::files("virt-api client certificate"),
                std::future::pending(),
            )?;
            let client_tls = tls::client_config(&ca, proxy_cert, tls::ALPN_HTTP1)?;
            virtapi::VirtApi::new(endpoint, Some(client_tls), &flags.service_account_user())?
        }
        flags::Hop::Sidecar(endpoint) => {
            tracing::info!(
                endpoint = %flags.kubevirt_endpoint,
                "virt-api through the rewriter sidecar (plain HTTP on loopback); the sidecar holds the client certificate"
            );
            virtapi::VirtApi::new(endpoint, None, &flags.service_account_user())?
        }
    };

    let config = kube::Config::infer()
        .await
        .map_err(|e| Error::Internal(format!("kubernetes client configuration: {e}")))?;
    let client = kube::Client::try_from(config)?;
    let cm = Api::<ConfigMap>::namespaced(client.clone(), "kube-system")
        .get("extension-apiserver-authentication")
        .await?;
    let authn = authn::RequestHeaderConfig::from_configmap(&cm.data.unwrap_or_default())?;
    let roots = tls::root_store(authn.client_ca.clone(), "requestheader-client-ca-file")
        .map_err(|e| Error::AuthConfig(e.to_string()))?;
    // Client certificates are requested and, when given, must chain to the requestheader CA;
    // connections without one are accepted and get 401 from the authenticator for everything
    // but the health paths.
    let server_tls =
        tls::server_config_with_client_ca(serving, roots, tls::ALPN_H2_HTTP1).map_err(|e| match e {
            tls::Error::ClientVerifier(_) => Error::AuthConfig(format!("requestheader-client-ca-file: {e}")),
            e => Error::Tls(e),
        })?;
    tracing::info!("waiting for the VirtualMachine cache to sync");
    let vms = vmcache::VmCache::start(client.clone()).await?;

    let app = Arc::new(app::App {
        authn,
        authz: authz::Authorizer::new(client),
        vms,
        virtapi,
    });
    let addr = std::net::SocketAddr::new(flags.bind_address, flags.secure_port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("binding {addr}: {e}")))?;
    tracing::info!(%addr, "serving");
    server::serve(
        listener,
        tokio_rustls::TlsAcceptor::from(Arc::new(server_tls)),
        app,
        shutdown,
    )
    .await;
    Ok(())
}
