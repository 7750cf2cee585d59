//! Command-line flags, named as the Go component's, and their validation.

use std::net::IpAddr;
use std::path::PathBuf;

use crate::error::{Error, Result};

/// The flags of `virtualization-api`. `KUBECONFIG` (or the in-cluster configuration) is used
/// for its own calls to kube-apiserver.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "virtualization-api", version, about)]
pub struct Flags {
    /// The HTTPS port.
    #[arg(long, default_value_t = 8443)]
    pub secure_port: u16,
    /// The address to listen on.
    #[arg(long, default_value = "0.0.0.0")]
    pub bind_address: IpAddr,
    /// The serving certificate (PEM; reloaded when it changes).
    #[arg(long)]
    pub tls_cert_file: PathBuf,
    /// The serving certificate's key (PEM; reloaded when it changes).
    #[arg(long)]
    pub tls_private_key_file: PathBuf,
    /// virt-api's address: `host[:port]` or `https://host[:port]` (port 443 by default): mutual
    /// TLS straight to virt-api. `http://127.0.0.1:PORT` (loopback only): plain HTTP to a
    /// kube-api-rewriter sidecar (`rules/virtualization-api.yaml`) that holds the client
    /// certificate and sets the identity; paths are then sent under this server's own group.
    #[arg(long)]
    pub kubevirt_endpoint: String,
    /// The CA bundle that signed virt-api's serving certificate (PEM; direct mode).
    #[arg(long)]
    pub kubevirt_cabundle: Option<PathBuf>,
    /// The client certificate presented to virt-api (PEM; reloaded when it changes; direct mode).
    #[arg(long)]
    pub proxy_client_cert_file: Option<PathBuf>,
    /// The client certificate's key (PEM; direct mode).
    #[arg(long)]
    pub proxy_client_key_file: Option<PathBuf>,
    /// This server's service account: the `X-Remote-User` sent to virt-api.
    #[arg(long, default_value = "virtualization-api")]
    pub service_account_name: String,
    /// The namespace of this server's service account.
    #[arg(long, default_value = "d8-virtualization")]
    pub service_account_namespace: String,
}

/// virt-api's host and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The host name or IP address (also the TLS server name).
    pub host: String,
    /// The port.
    pub port: u16,
    /// `false`: plain HTTP to a rewriter sidecar on loopback.
    pub tls: bool,
}

/// How virt-api is reached, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hop {
    /// Mutual TLS straight to virt-api.
    Direct {
        /// virt-api.
        endpoint: Endpoint,
        /// `--kubevirt-cabundle`.
        ca: PathBuf,
        /// `--proxy-client-cert-file`.
        cert: PathBuf,
        /// `--proxy-client-key-file`.
        key: PathBuf,
    },
    /// Plain HTTP to the rewriter sidecar on loopback.
    Sidecar(Endpoint),
}

impl Flags {
    /// Checks what clap cannot: the endpoint, the files its mode needs, and the service
    /// account's names.
    pub fn validate(&self) -> Result<Hop> {
        for (flag, v) in [
            ("--service-account-name", &self.service_account_name),
            ("--service-account-namespace", &self.service_account_namespace),
        ] {
            if !is_dns_subdomain(v) {
                return Err(Error::Flag {
                    flag,
                    message: format!("{v:?} is not a valid Kubernetes name"),
                });
            }
        }
        let endpoint = parse_endpoint(&self.kubevirt_endpoint)?;
        if !endpoint.tls {
            return Ok(Hop::Sidecar(endpoint));
        }
        let need = |flag: &'static str, v: &Option<PathBuf>| {
            v.clone().ok_or_else(|| Error::Flag {
                flag,
                message: "required with an https virt-api endpoint".into(),
            })
        };
        Ok(Hop::Direct {
            endpoint,
            ca: need("--kubevirt-cabundle", &self.kubevirt_cabundle)?,
            cert: need("--proxy-client-cert-file", &self.proxy_client_cert_file)?,
            key: need("--proxy-client-key-file", &self.proxy_client_key_file)?,
        })
    }

    /// The `X-Remote-User` this server sends to virt-api.
    pub fn service_account_user(&self) -> String {
        format!(
            "system:serviceaccount:{}:{}",
            self.service_account_namespace, self.service_account_name
        )
    }
}

/// Parses `--kubevirt-endpoint`: `host`, `host:port`, `https://host[:port]`, `[v6]:port`,
/// or `http://` with a loopback host (the rewriter sidecar; port 80 by default).
pub fn parse_endpoint(s: &str) -> Result<Endpoint> {
    let bad = |message: String| Error::Flag {
        flag: "--kubevirt-endpoint",
        message,
    };
    let (rest, tls) = match s.split_once("://") {
        Some(("https", rest)) => (rest, true),
        Some(("http", rest)) => (rest, false),
        Some((scheme, _)) => {
            return Err(bad(format!(
                "scheme {scheme:?}: only https, or http to a sidecar on loopback"
            )));
        }
        None => (s, true),
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
        return Err(bad(format!("{s:?} is not host[:port]")));
    }
    let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or_else(|| bad(format!("{s:?}: unclosed [")))?;
        match after {
            "" => (h, None),
            p => (
                h,
                Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| bad(format!("{s:?} is not host[:port]")))?,
                ),
            ),
        }
    } else {
        match rest.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        }
    };
    if host.is_empty() {
        return Err(bad(format!("{s:?} has no host")));
    }
    if !tls && !is_loopback(host) {
        return Err(bad(format!(
            "{s:?}: plain http only to a sidecar on loopback (127.0.0.1, ::1, localhost)"
        )));
    }
    let port = match port {
        None if tls => 443,
        None => 80,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => n,
            _ => return Err(bad(format!("{s:?}: port {p:?} is not 1-65535"))),
        },
    };
    Ok(Endpoint {
        host: host.to_owned(),
        port,
        tls,
    })
}

fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !s.starts_with(['-', '.'])
        && !s.ends_with(['-', '.'])
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn ep(h: &str, p: u16) -> Endpoint {
        Endpoint {
            host: h.into(),
            port: p,
            tls: true,
        }
    }

    #[test]
    fn endpoints() {
        assert_eq!(
            parse_endpoint("virt-api.d8-virtualization.svc").unwrap(),
            ep("virt-api.d8-virtualization.svc", 443)
        );
        assert_eq!(parse_endpoint("127.0.0.1:8443").unwrap(), ep("127.0.0.1", 8443));
        assert_eq!(
            parse_endpoint("https://localhost:9/").unwrap(),
            ep("localhost", 9)
        );
        assert_eq!(parse_endpoint("[::1]:8443").unwrap(), ep("::1", 8443));
        assert_eq!(parse_endpoint("[::1]").unwrap(), ep("::1", 443));
        let sidecar = Endpoint {
            tls: false,
            ..ep("127.0.0.1", 23916)
        };
        assert_eq!(parse_endpoint("http://127.0.0.1:23916").unwrap(), sidecar);
        assert!(!parse_endpoint("http://[::1]:1").unwrap().tls);
        assert_eq!(parse_endpoint("http://localhost").unwrap().port, 80);
        for bad in [
            "",
            "http://virt-api",
            "http://10.0.0.1:80",
            "ftp://localhost",
            ":443",
            "host:0",
            "host:70000",
            "host:x",
            "host/path",
            "user@host",
            "[::1",
            "[::1]x",
        ] {
            let e = parse_endpoint(bad).unwrap_err();
            assert!(
                e.to_string().starts_with("flag --kubevirt-endpoint: "),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn flags_parse_with_the_go_names_and_defaults() {
        let f = Flags::try_parse_from([
            "virtualization-api",
            "--tls-cert-file=/c",
            "--tls-private-key-file=/k",
            "--kubevirt-endpoint=virt-api.d8-virtualization.svc",
            "--kubevirt-cabundle=/ca",
            "--proxy-client-cert-file=/pc",
            "--proxy-client-key-file=/pk",
        ])
        .unwrap();
        assert_eq!(f.secure_port, 8443);
        assert_eq!(
            f.service_account_user(),
            "system:serviceaccount:d8-virtualization:virtualization-api"
        );
        assert!(matches!(f.validate().unwrap(), Hop::Direct { endpoint, .. } if endpoint.port == 443));
        // The sidecar mode needs no certificate; the direct mode all three files.
        let mut s = f.clone();
        s.kubevirt_endpoint = "http://127.0.0.1:23916".into();
        s.kubevirt_cabundle = None;
        assert!(matches!(s.validate().unwrap(), Hop::Sidecar(_)));
        s.kubevirt_endpoint = "https://localhost:9".into();
        assert!(
            s.validate()
                .unwrap_err()
                .to_string()
                .contains("--kubevirt-cabundle")
        );
        let mut g = f.clone();
        g.service_account_name = "Bad:Name".into();
        assert!(
            g.validate()
                .unwrap_err()
                .to_string()
                .contains("--service-account-name")
        );
        // A required flag missing is clap's error.
        assert!(Flags::try_parse_from(["virtualization-api", "--tls-cert-file=/c"]).is_err());
    }
}
