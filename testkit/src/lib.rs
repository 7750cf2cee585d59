//! What the workspace's end-to-end tests share: the real local control plane
//! (`kube-api-rewriter-env`, behind `scripts/control-plane.sh`), the `kube-api-rewriter`
//! binary as a child process, curl, kubectl and openssl, and a way to run test doubles. Test code only (`publish = false`).
#![allow(missing_docs)]

mod aggregated;
mod commands;
mod control_plane;
mod doubles;
mod dvcr;
mod files;
mod kubevirt;
mod paths;
mod pki;
pub mod procfs;
mod proxy_proc;
mod rbac_proxy;
pub mod report;
mod suite;
pub mod vm;

pub use aggregated::{APISERVICE, SUBRESOURCES_PATH, VirtualizationApi, register_apiservice};
pub use commands::{
    WEBSOCKET_UPGRADE, curl, fails, http_status, kubectl, kubectl_in, ok, openssl, parse_json,
};
pub use control_plane::ControlPlane;
pub use doubles::{line_channel, spawn_double};
pub use dvcr::Dvcr;
pub use files::FileServer;
pub use kubevirt::KubeVirt;
pub use paths::{
    crd_fixtures, free_port, kube_bin_dir, kubectl_bin, rewriter_bin, temp_dir, testdata, workspace,
    workspace_bin,
};
pub use pki::{make_ca, self_signed_cert, signed_cert};
// The /proc readers the tests call at the crate root.
pub use procfs::{TcpSocket, open_sockets, tcp_connections_to, tcp_sockets, tcp_timer, tcp_timers};
pub use proxy_proc::{ProxyProc, wait_crd_established};
pub use rbac_proxy::{KubeRbacProxy, kube_rbac_proxy_bin};
pub use suite::{Suite, panic_message, shared};
