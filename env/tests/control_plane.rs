//! The control plane up and down for real (etcd and the Kubernetes binaries of
//! `KUBE_BIN_DIR`/`ETCD_BIN`, else built by `scripts/go-build.sh`): what runs, the env file,
//! an apiserver restart, the guard's down on drop, a failed `up` that names what it waited
//! for, shows the log's tail and leaves nothing running, a component that dies reported with
//! its log's tail, and `up`/`down` twice in a row.

use std::path::PathBuf;

use kube_api_rewriter_env::{Config, ControlPlane, Error, parse_assignments, pid_alive, port_in_use};

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kar-env-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn pids(cp: &ControlPlane) -> Vec<(String, u32)> {
    cp.env()
        .unwrap()
        .into_iter()
        .filter(|(k, v)| k.ends_with("_PID") && !v.is_empty())
        .map(|(k, v)| (k, v.parse().unwrap()))
        .collect()
}

#[test]
fn up_restart_and_down_on_drop() {
    let dir = temp_dir("up");
    let mut log = Vec::new();
    let running = ControlPlane::new(&dir, Config::from_env().unwrap())
        .start(&mut log)
        .unwrap_or_else(|e| panic!("up: {e}\n{}", String::from_utf8_lossy(&log)));
    let status = running.status().unwrap();
    assert!(status.all_up, "{:?}", status.lines);
    let before = pids(&running);
    assert_eq!(before.len(), 4, "{before:?}");
    let env = parse_assignments(&running.env_file().unwrap());
    let get = |k: &str| env.iter().find(|(n, _)| n == k).unwrap().1.clone();
    assert_eq!(
        get("KUBE_APISERVER_URL"),
        format!("https://127.0.0.1:{}", get("APISERVER_PORT"))
    );
    assert!(PathBuf::from(get("KUBECONFIG")).exists());

    running.restart_apiserver(&mut log).unwrap();
    assert!(running.status().unwrap().all_up);
    let after = pids(&running);
    let api = |p: &[(String, u32)]| p.iter().find(|(k, _)| k == "APISERVER_PID").unwrap().1;
    assert_ne!(api(&before), api(&after), "a new kube-apiserver");

    drop(running);
    for (k, pid) in after {
        assert!(!pid_alive(pid, ""), "{k} {pid} still runs after drop");
    }
    let cp = ControlPlane::new(&dir, Config::from_env().unwrap());
    assert!(!cp.status().unwrap().all_up);
    assert!(pids(&cp).is_empty(), "the env file lists no PIDs after down");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn failed_up_names_the_wait_and_stops_everything() {
    let dir = temp_dir("fail");
    let config = Config::from_vars(|k| match k {
        "KAR_APISERVER_EXTRA_ARGS" => Some("--no-such-flag".into()),
        _ => std::env::var(k).ok(),
    })
    .unwrap();
    let cp = ControlPlane::new(&dir, config);
    let err = cp.up(&mut Vec::new()).unwrap_err();
    assert!(matches!(err, Error::Exited { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("kube-apiserver /readyz"), "{text}");
    assert!(text.contains("unknown flag: --no-such-flag"), "{text}");
    assert!(!cp.status().unwrap().all_up);
    let lines = cp.status().unwrap().lines;
    assert!(lines.iter().all(|l| l.ends_with("stopped")), "{lines:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_component_that_dies_is_reported_and_down_then_leaves_nothing() {
    let dir = temp_dir("crash");
    let cp = ControlPlane::new(&dir, Config::from_env().unwrap());
    let mut log = Vec::new();
    for round in 0..2 {
        cp.up(&mut log)
            .unwrap_or_else(|e| panic!("up {round}: {e}\n{}", String::from_utf8_lossy(&log)));
        assert!(cp.status().unwrap().all_up, "round {round}");
        let env = parse_assignments(&cp.env_file().unwrap());
        let get = |k: &str| env.iter().find(|(n, _)| n == k).unwrap().1.clone();
        let ports: Vec<u16> = ["ETCD_CLIENT_PORT", "ETCD_PEER_PORT", "APISERVER_PORT"]
            .map(|k| get(k).parse().unwrap())
            .into();
        let all = pids(&cp);
        let scheduler = all.iter().find(|(k, _)| k == "SCHEDULER_PID").unwrap().1;
        let p = rustix::process::Pid::from_raw(scheduler as i32).unwrap();
        rustix::process::kill_process(p, rustix::process::Signal::KILL).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while pid_alive(scheduler, "") && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let status = cp.status().unwrap();
        assert!(!status.all_up);
        let line = status
            .lines
            .iter()
            .find(|l| l.starts_with("kube-scheduler:"))
            .unwrap();
        assert!(
            line.starts_with(&format!("kube-scheduler: exited (pid {scheduler}); the end of")),
            "{line}"
        );
        assert!(line.lines().count() > 1, "the log's tail follows: {line}");

        cp.down(&mut log).unwrap();
        for (k, pid) in &all {
            assert!(
                !pid_alive(*pid, ""),
                "round {round}: {k} {pid} still runs after down"
            );
        }
        for port in ports {
            assert!(
                !port_in_use(port),
                "round {round}: port {port} still taken after down"
            );
        }
        assert!(cp.status().unwrap().lines.iter().all(|l| l.ends_with("stopped")));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
