//! A registry that asks for Bearer tokens (`WWW-Authenticate: Bearer realm=...`), as public
//! registries do: docker-registry with `auth.token`, and a token service in the test that
//! signs JWTs (RS256, the signing certificate in `x5c`) for Basic credentials.

use std::io::{BufRead as _, Write as _};
use std::net::TcpListener;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};

use super::*;

const SERVICE: &str = "dvcr-token-test";
const ISSUER: &str = "dvcr-token-issuer";
const PASSWORD: &str = "token-secret";

/// docker-registry with token authentication, its token service, and an auth file.
struct TokenRegistry {
    child: std::process::Child,
    address: String,
    auth_file: PathBuf,
    bad_auth_file: PathBuf,
}

impl Drop for TokenRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn der(args: &[&str]) {
    let o = Command::new("openssl").args(args).output().expect("openssl runs");
    assert!(
        o.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

impl TokenRegistry {
    fn start(env: &Env) -> TokenRegistry {
        let work = env.tmp("token-registry");
        let (crt, key) = make_ca(&work, "token-signer");
        let (crt_der, key_der) = (work.join("signer.der"), work.join("signer.pk8"));
        der(&[
            "x509",
            "-in",
            path(&crt),
            "-outform",
            "DER",
            "-out",
            path(&crt_der),
        ]);
        der(&[
            "pkcs8",
            "-topk8",
            "-nocrypt",
            "-in",
            path(&key),
            "-outform",
            "DER",
            "-out",
            path(&key_der),
        ]);
        let signer = ring::signature::RsaKeyPair::from_pkcs8(&std::fs::read(&key_der).unwrap()).unwrap();
        let x5c = STANDARD.encode(std::fs::read(&crt_der).unwrap());
        let tokens = TcpListener::bind("127.0.0.1:0").unwrap();
        let realm = format!("http://{}/token", tokens.local_addr().unwrap());
        std::thread::spawn(move || {
            for conn in tokens.incoming().flatten() {
                let _ = answer_token(conn, &signer, &x5c);
            }
        });

        let pki = env.dvcr().dir.join("dvcr/pki");
        let port = free_port();
        let address = format!("127.0.0.1:{port}");
        let config = work.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {address}\n  tls:\n    certificate: {}\n    key: {}\nauth:\n  token:\n    realm: {realm}\n    service: {SERVICE}\n    issuer: {ISSUER}\n    rootcertbundle: {}\n",
                path(&work.join("storage")),
                path(&pki.join("tls.crt")),
                path(&pki.join("tls.key")),
                path(&crt),
            ),
        )
        .unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(work.join("registry.log")).unwrap())
            .spawn()
            .expect("docker-registry runs");
        let auth = |password: &str| {
            let f = work.join(format!("auth-{password}.json"));
            let a = STANDARD.encode(format!("admin:{password}"));
            std::fs::write(&f, format!(r#"{{"auths":{{"{address}":{{"auth":"{a}"}}}}}}"#)).unwrap();
            f
        };
        let r = TokenRegistry {
            child,
            auth_file: auth(PASSWORD),
            bad_auth_file: auth("wrong"),
            address,
        };
        let t = Instant::now();
        loop {
            let o = Command::new("curl")
                .args([
                    "-s",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{http_code}",
                    "--cacert",
                    path(&env.dvcr().ca_file),
                ])
                .arg(format!("https://{}/v2/", r.address))
                .output()
                .unwrap();
            if o.stdout == b"401" {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(20), "token registry not ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        r
    }
}

/// `GET /token?scope=repository:NAME:ACTIONS&service=...` with Basic credentials: a JWT.
fn answer_token(
    mut conn: std::net::TcpStream,
    signer: &ring::signature::RsaKeyPair,
    x5c: &str,
) -> std::io::Result<()> {
    let mut reader = std::io::BufReader::new(conn.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut authorized = false;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
        if let Some(v) = h
            .trim()
            .strip_prefix("Authorization: Basic ")
            .or_else(|| h.trim().strip_prefix("authorization: Basic "))
        {
            authorized = STANDARD.decode(v).ok().as_deref() == Some(format!("admin:{PASSWORD}").as_bytes());
        }
    }
    if !authorized {
        return conn
            .write_all(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    }
    let target = line.split_whitespace().nth(1).unwrap_or("");
    let query = target.split_once('?').map_or("", |(_, q)| q);
    let mut access = Vec::new();
    for kv in query.split('&') {
        if let Some(scope) = kv.strip_prefix("scope=") {
            let mut parts = scope.splitn(3, ':');
            let (kind, name, actions) = (
                parts.next().unwrap(),
                parts.next().unwrap(),
                parts.next().unwrap(),
            );
            let actions: Vec<&str> = actions.split(',').collect();
            access.push(serde_json::json!({"type": kind, "name": name, "actions": actions}));
        }
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let header = serde_json::json!({"alg": "RS256", "typ": "JWT", "x5c": [x5c]});
    let claims = serde_json::json!({
        "iss": ISSUER, "sub": "admin", "aud": SERVICE, "exp": now + 300, "nbf": now - 10,
        "iat": now - 10, "jti": format!("{now}-{}", access.len()), "access": access,
    });
    let signing_input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&header).unwrap()),
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap())
    );
    let mut sig = vec![0u8; signer.public().modulus_len()];
    signer
        .sign(
            &ring::signature::RSA_PKCS1_SHA256,
            &ring::rand::SystemRandom::new(),
            signing_input.as_bytes(),
            &mut sig,
        )
        .unwrap();
    let token = format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(sig));
    let body = serde_json::json!({"token": token, "expires_in": 300}).to_string();
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    conn.write_all(body.as_bytes())
}

#[test]
fn bearer_token_registry_push_and_pull() {
    let env = env();
    let reg = TokenRegistry::start(&env);
    let image = format!("{}/vi/ns/token:v1", reg.address);
    let ca = path(&env.dvcr().ca_file).to_owned();
    let mut vars = env.http("disk.qcow2");
    vars.extend([
        ("DESTINATION", "registry".into()),
        ("DESTINATION_IMAGE", image.clone()),
        ("DESTINATION_AUTH_FILE", path(&reg.auth_file).into()),
        ("DESTINATION_CA_FILE", ca.clone()),
    ]);
    let m = succeeds(import(&vars));
    assert_eq!(m.format.as_deref(), Some("qcow2"));

    let pvc = env.tmp("token-pvc");
    let vars = vec![
        ("SOURCE", "registry".into()),
        ("SOURCE_IMAGE", image.clone()),
        ("SOURCE_AUTH_FILE", path(&reg.auth_file).into()),
        ("SOURCE_CA_FILE", ca.clone()),
        ("DESTINATION", "dir".into()),
        ("DESTINATION_DIR", path(&pvc).into()),
    ];
    succeeds(import(&vars));
    assert_eq!(
        std::fs::read(pvc.join("disk.img")).unwrap(),
        std::fs::read(env.dir.join("disk.raw")).unwrap()
    );

    let mut vars = env.http("disk.qcow2");
    vars.extend([
        ("DESTINATION", "registry".into()),
        (
            "DESTINATION_IMAGE",
            format!("{}/vi/ns/token-denied:v1", reg.address),
        ),
        ("DESTINATION_AUTH_FILE", path(&reg.bad_auth_file).into()),
        ("DESTINATION_CA_FILE", ca),
    ]);
    fails(
        import(&vars),
        &format!(
            "registry {} refused the credentials (401 Unauthorized)",
            reg.address
        ),
    );
}
