//! What the control plane writes and reads back in its directory: the state of `up`, the
//! `env` file for `source`, the token file and kubeconfigs, and each component's flags. Pure:
//! no process is started here.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The admin user's token (group `system:masters`).
pub const ADMIN_TOKEN: &str = "admintoken";
/// user1's token (no groups).
pub const USER1_TOKEN: &str = "usertoken";

/// What `up` decided and later commands read back: `DIR/state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// etcd's client port.
    pub etcd_client_port: u16,
    /// etcd's peer port.
    pub etcd_peer_port: u16,
    /// kube-apiserver's secure port.
    pub apiserver_port: u16,
    /// kube-controller-manager's secure port.
    pub kcm_port: u16,
    /// kube-scheduler's secure port.
    pub scheduler_port: u16,
    /// The etcd binary.
    pub etcd_bin: PathBuf,
    /// The directory of the Kubernetes binaries.
    pub kube_bin_dir: PathBuf,
    /// The release, as `kube-apiserver --version` says (`v1.36.3`).
    pub kube_version: String,
}

impl State {
    /// `KEY=value` lines, the values quoted for a shell.
    pub fn render(&self) -> String {
        let mut s = String::new();
        for (k, v) in [
            ("ETCD_CLIENT_PORT", self.etcd_client_port.to_string()),
            ("ETCD_PEER_PORT", self.etcd_peer_port.to_string()),
            ("APISERVER_PORT", self.apiserver_port.to_string()),
            ("KCM_PORT", self.kcm_port.to_string()),
            ("SCHEDULER_PORT", self.scheduler_port.to_string()),
            ("ETCD_BIN", self.etcd_bin.display().to_string()),
            ("KUBE_BIN_DIR", self.kube_bin_dir.display().to_string()),
            ("KUBE_VERSION", self.kube_version.clone()),
        ] {
            s.push_str(&format!("{k}={}\n", shell_quote(&v)));
        }
        s
    }

    /// Reads what [`State::render`] (or the bash script before it) wrote.
    pub fn parse(file: &Path, text: &str) -> Result<State> {
        let vars = parse_assignments(text);
        let get = |k: &str| {
            vars.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .ok_or_else(|| Error::BadFile {
                    file: file.to_path_buf(),
                    problem: format!("no {k}"),
                })
        };
        let port = |k: &str| -> Result<u16> {
            let v = get(k)?;
            v.parse().map_err(|_| Error::BadFile {
                file: file.to_path_buf(),
                problem: format!("{k}={v} is not a port"),
            })
        };
        Ok(State {
            etcd_client_port: port("ETCD_CLIENT_PORT")?,
            etcd_peer_port: port("ETCD_PEER_PORT")?,
            apiserver_port: port("APISERVER_PORT")?,
            kcm_port: port("KCM_PORT")?,
            scheduler_port: port("SCHEDULER_PORT")?,
            etcd_bin: get("ETCD_BIN")?.into(),
            kube_bin_dir: get("KUBE_BIN_DIR")?.into(),
            kube_version: get("KUBE_VERSION")?,
        })
    }
}

/// The PIDs written into the env file (`None`: not running).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pids {
    /// etcd.
    pub etcd: Option<u32>,
    /// kube-apiserver.
    pub apiserver: Option<u32>,
    /// kube-controller-manager.
    pub kcm: Option<u32>,
    /// kube-scheduler.
    pub scheduler: Option<u32>,
}

/// The variables of `DIR/env`, in its order.
pub fn env_vars(dir: &Path, state: &State, pids: Pids) -> Vec<(&'static str, String)> {
    let p = |s: &str| dir.join(s).display().to_string();
    let pid = |p: Option<u32>| p.map(|p| p.to_string()).unwrap_or_default();
    let port = state.apiserver_port;
    vec![
        ("KAR_DIR", dir.display().to_string()),
        ("KUBE_APISERVER_URL", format!("https://127.0.0.1:{port}")),
        ("KUBECONFIG", p("admin.kubeconfig")),
        ("USER1_KUBECONFIG", p("user1.kubeconfig")),
        ("APISERVER_PORT", port.to_string()),
        ("APISERVER_PID", pid(pids.apiserver)),
        ("ETCD_CLIENT_PORT", state.etcd_client_port.to_string()),
        ("ETCD_PEER_PORT", state.etcd_peer_port.to_string()),
        ("ETCD_URL", format!("http://127.0.0.1:{}", state.etcd_client_port)),
        ("ETCD_PID", pid(pids.etcd)),
        ("KUBE_CA_FILE", p("pki/ca.crt")),
        ("ADMIN_TOKEN", ADMIN_TOKEN.to_owned()),
        ("USER1_TOKEN", USER1_TOKEN.to_owned()),
        ("FRONT_PROXY_CA_FILE", p("pki/front-proxy-ca.crt")),
        ("FRONT_PROXY_CA_KEY", p("pki/front-proxy-ca.key")),
        ("FRONT_PROXY_CLIENT_CERT", p("pki/front-proxy-client.crt")),
        ("FRONT_PROXY_CLIENT_KEY", p("pki/front-proxy-client.key")),
        ("CONTROLLER_MANAGER_PORT", state.kcm_port.to_string()),
        ("CONTROLLER_MANAGER_PID", pid(pids.kcm)),
        ("SCHEDULER_PORT", state.scheduler_port.to_string()),
        ("SCHEDULER_PID", pid(pids.scheduler)),
        ("KUBE_BIN_DIR", state.kube_bin_dir.display().to_string()),
        ("KUBE_VERSION", state.kube_version.clone()),
        ("ETCD_BIN", state.etcd_bin.display().to_string()),
    ]
}

/// `DIR/env`: a header line and `export NAME=value` lines for a shell to `source`.
pub fn render_env(vars: &[(&str, String)]) -> String {
    let mut s = String::from("# generated by kar-env (scripts/control-plane.sh); source it\n");
    for (k, v) in vars {
        s.push_str(&format!("export {k}={}\n", shell_quote(v)));
    }
    s
}

/// `NAME=value` pairs of a file of shell assignments (`export ` optional, comments skipped),
/// values unquoted as a shell would for what [`shell_quote`] and bash's `printf %q` write.
pub fn parse_assignments(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("export ").unwrap_or(l);
            if l.starts_with('#') {
                return None;
            }
            let (k, v) = l.split_once('=')?;
            Some((k.to_owned(), shell_unquote(v)))
        })
        .collect()
}

/// `s` as one shell word: as is when it holds only safe characters, else single-quoted.
pub fn shell_quote(s: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_-./:,+@%=".contains(c);
    if !s.is_empty() && s.chars().all(safe) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn shell_unquote(v: &str) -> String {
    let mut out = String::new();
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => out.extend(chars.by_ref().take_while(|&c| c != '\'')),
            '\\' => out.extend(chars.next()),
            c => out.push(c),
        }
    }
    out
}

/// `tokens.csv`: the four users.
pub fn tokens_csv(kcm_token: &str, scheduler_token: &str) -> String {
    format!(
        "{ADMIN_TOKEN},admin,admin,\"system:masters\"\n{USER1_TOKEN},user1,user1\n\
         {kcm_token},system:kube-controller-manager,system:kube-controller-manager\n\
         {scheduler_token},system:kube-scheduler,system:kube-scheduler\n"
    )
}

/// A kubeconfig for `user` with a bearer `token`, trusting the CA given as base64 PEM.
pub fn kubeconfig(apiserver_port: u16, ca_base64: &str, user: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kar-local\n  cluster:\n    \
         server: https://127.0.0.1:{apiserver_port}\n    certificate-authority-data: {ca_base64}\n\
         users:\n- name: {user}\n  user:\n    token: {token}\ncontexts:\n- name: {user}@kar-local\n  \
         context:\n    cluster: kar-local\n    user: {user}\ncurrent-context: {user}@kar-local\n"
    )
}

/// kube-apiserver's flags, then `extra`.
pub fn apiserver_args(dir: &Path, state: &State, extra: &[String]) -> Vec<String> {
    let pki = |f: &str| dir.join("pki").join(f).display().to_string();
    let mut args = vec![
        format!("--etcd-servers=http://127.0.0.1:{}", state.etcd_client_port),
        format!("--secure-port={}", state.apiserver_port),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        format!("--cert-dir={}", dir.join("apiserver-certs").display()),
        format!("--tls-cert-file={}", pki("apiserver.crt")),
        format!("--tls-private-key-file={}", pki("apiserver.key")),
        "--service-account-issuer=https://kubernetes.default.svc".into(),
        format!("--service-account-key-file={}", pki("sa.pub")),
        format!("--service-account-signing-key-file={}", pki("sa.key")),
        format!("--token-auth-file={}", dir.join("tokens.csv").display()),
        "--authorization-mode=RBAC".into(),
        // As kubeadm and most clusters: virt-handler's DaemonSet is privileged.
        "--allow-privileged=true".into(),
        "--service-cluster-ip-range=10.0.0.0/24".into(),
        "--endpoint-reconciler-type=none".into(),
        format!("--requestheader-client-ca-file={}", pki("front-proxy-ca.crt")),
        "--requestheader-allowed-names=front-proxy-client".into(),
        "--requestheader-username-headers=X-Remote-User".into(),
        "--requestheader-group-headers=X-Remote-Group".into(),
        "--requestheader-extra-headers-prefix=X-Remote-Extra-".into(),
        format!("--proxy-client-cert-file={}", pki("front-proxy-client.crt")),
        format!("--proxy-client-key-file={}", pki("front-proxy-client.key")),
    ];
    args.extend(extra.iter().cloned());
    args
}

pub(super) fn etcd_args(dir: &Path, state: &State) -> Vec<String> {
    let client = format!("http://127.0.0.1:{}", state.etcd_client_port);
    let peer = format!("http://127.0.0.1:{}", state.etcd_peer_port);
    [
        "--name",
        "kar",
        "--data-dir",
        &dir.join("etcd-data").display().to_string(),
        "--listen-client-urls",
        &client,
        "--advertise-client-urls",
        &client,
        "--listen-peer-urls",
        &peer,
        "--initial-advertise-peer-urls",
        &peer,
        "--initial-cluster",
        &format!("kar={peer}"),
        "--initial-cluster-state",
        "new",
        "--logger",
        "zap",
        "--log-outputs",
        "stderr",
    ]
    .map(str::to_owned)
    .to_vec()
}

pub(super) fn kcm_args(dir: &Path, state: &State) -> Vec<String> {
    let pki = |f: &str| dir.join("pki").join(f).display().to_string();
    vec![
        format!(
            "--kubeconfig={}",
            dir.join("kube-controller-manager.kubeconfig").display()
        ),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={}", state.kcm_port),
        format!("--cert-dir={}", dir.join("kcm-certs").display()),
        "--leader-elect=false".into(),
        "--use-service-account-credentials=true".into(),
        format!("--service-account-private-key-file={}", pki("sa.key")),
        format!("--root-ca-file={}", pki("ca.crt")),
        "--service-cluster-ip-range=10.0.0.0/24".into(),
        "--controllers=*".into(),
    ]
}

pub(super) fn scheduler_args(dir: &Path, state: &State) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", dir.join("kube-scheduler.kubeconfig").display()),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={}", state.scheduler_port),
        format!("--cert-dir={}", dir.join("scheduler-certs").display()),
        "--leader-elect=false".into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> State {
        State {
            etcd_client_port: 20001,
            etcd_peer_port: 20002,
            apiserver_port: 20003,
            kcm_port: 20004,
            scheduler_port: 20005,
            etcd_bin: "/bin dir/etcd".into(),
            kube_bin_dir: "/k8s".into(),
            kube_version: "v1.36.3".into(),
        }
    }

    #[test]
    fn state_round_trips() {
        let s = state();
        let text = s.render();
        assert!(text.contains("ETCD_BIN='/bin dir/etcd'\n"), "{text}");
        assert_eq!(State::parse(Path::new("state"), &text).unwrap(), s);
        // what bash's printf %q wrote
        let bash = "ETCD_CLIENT_PORT=20001\nETCD_PEER_PORT=20002\nAPISERVER_PORT=20003\nKCM_PORT=20004\n\
                    SCHEDULER_PORT=20005\nETCD_BIN=/bin\\ dir/etcd\nKUBE_BIN_DIR=/k8s\nKUBE_VERSION=v1.36.3\n";
        assert_eq!(State::parse(Path::new("state"), bash).unwrap(), s);
        assert!(State::parse(Path::new("state"), "APISERVER_PORT=x").is_err());
    }

    #[test]
    fn env_file_has_the_scripts_variables() {
        let vars = env_vars(
            Path::new("/tmp/cp"),
            &state(),
            Pids {
                apiserver: Some(42),
                ..Pids::default()
            },
        );
        let text = render_env(&vars);
        for line in [
            "export KAR_DIR=/tmp/cp\n",
            "export KUBE_APISERVER_URL=https://127.0.0.1:20003\n",
            "export KUBECONFIG=/tmp/cp/admin.kubeconfig\n",
            "export USER1_KUBECONFIG=/tmp/cp/user1.kubeconfig\n",
            "export APISERVER_PORT=20003\n",
            "export APISERVER_PID=42\n",
            "export ETCD_URL=http://127.0.0.1:20001\n",
            "export ETCD_PID=''\n",
            "export KUBE_CA_FILE=/tmp/cp/pki/ca.crt\n",
            "export ADMIN_TOKEN=admintoken\n",
            "export USER1_TOKEN=usertoken\n",
            "export FRONT_PROXY_CLIENT_KEY=/tmp/cp/pki/front-proxy-client.key\n",
            "export CONTROLLER_MANAGER_PORT=20004\n",
            "export SCHEDULER_PORT=20005\n",
            "export KUBE_VERSION=v1.36.3\n",
            "export ETCD_BIN='/bin dir/etcd'\n",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        assert_eq!(vars.len(), 24);
        let parsed = parse_assignments(&text);
        assert_eq!(parsed.len(), vars.len());
        for ((k, v), (pk, pv)) in vars.iter().zip(&parsed) {
            assert_eq!((*k, v.as_str()), (pk.as_str(), pv.as_str()));
        }
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("a/b:1"), "a/b:1");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_unquote(r"'it'\''s'"), "it's");
    }

    #[test]
    fn tokens_and_kubeconfig() {
        let t = tokens_csv("k", "s");
        assert_eq!(
            t.lines().collect::<Vec<_>>(),
            [
                "admintoken,admin,admin,\"system:masters\"",
                "usertoken,user1,user1",
                "k,system:kube-controller-manager,system:kube-controller-manager",
                "s,system:kube-scheduler,system:kube-scheduler",
            ]
        );
        let k = kubeconfig(20003, "Q0E=", "user1", "usertoken");
        assert!(k.contains("    server: https://127.0.0.1:20003\n"));
        assert!(k.contains("    certificate-authority-data: Q0E=\n"));
        assert!(k.contains("    token: usertoken\n"));
        assert!(k.ends_with("current-context: user1@kar-local\n"));
    }

    #[test]
    fn apiserver_flags_then_extra() {
        let a = apiserver_args(Path::new("/d"), &state(), &["--v=4".into()]);
        assert_eq!(a[0], "--etcd-servers=http://127.0.0.1:20001");
        assert!(a.contains(&"--secure-port=20003".to_owned()));
        assert!(a.contains(&"--token-auth-file=/d/tokens.csv".to_owned()));
        assert!(a.contains(&"--requestheader-allowed-names=front-proxy-client".to_owned()));
        assert_eq!(a.last().unwrap(), "--v=4");
        // loopback only
        let addrs: Vec<_> = a.iter().filter(|f| f.contains("-address=")).collect();
        assert_eq!(
            addrs,
            ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1"]
        );
    }
}
