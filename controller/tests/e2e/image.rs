//! VirtualImages and disks filled from them: imports over HTTP into DVCR (a real registry)
//! read back through the registry's API, uploads, disks filled from an image in their claim's
//! volume, a VM given an image as a CD-ROM, and each way an import fails.

use std::path::{Path, PathBuf};
use std::process::Command;

use kube_api_rewriter_testkit::*;
use serde_json::Value;

use crate::env::*;

/// Our VirtualImages.
pub const VI: &str = "virtualimages.virtualization.deckhouse.io";

/// A disk of `mib` MiB of pseudo-random bytes (`seed` picks which), at `path`.
fn raw_disk(path: &Path, mib: usize, seed: u64) {
    let mut x = seed | 1;
    let mut bytes = Vec::with_capacity(mib << 20);
    while bytes.len() < mib << 20 {
        // xorshift64: different bytes everywhere, so no block is a hole.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    std::fs::write(path, bytes).expect("disk written");
}

/// An ISO 9660 image of `sectors` 2 KiB sectors: the `CD001` volume descriptor at 0x8001.
fn iso(path: &Path, sectors: usize) {
    let mut bytes = vec![0u8; sectors * 2048];
    bytes[0x8000] = 1;
    bytes[0x8001..0x8006].copy_from_slice(b"CD001");
    bytes[0x8006] = 1;
    std::fs::write(path, bytes).expect("iso written");
}

/// `sha256sum` of a file.
pub fn sha256(path: &Path) -> String {
    let out = ok(&Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum runs"));
    out.split_whitespace().next().expect("a digest").to_owned()
}

fn run(cmd: &mut Command) -> String {
    ok(&cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}")))
}

/// A VirtualImage's manifest.
fn vi_yaml(ns: &str, name: &str, data_source: &str) -> String {
    format!(
        "apiVersion: virtualization.deckhouse.io/v1alpha2\nkind: VirtualImage\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  storage: ContainerRegistry\n  dataSource: {data_source}\n"
    )
}

fn http_source(url: &str, sha256: Option<&str>) -> String {
    match sha256 {
        Some(s) => format!("{{type: HTTP, http: {{url: \"{url}\", checksum: {{sha256: \"{s}\"}}}}}}"),
        None => format!("{{type: HTTP, http: {{url: \"{url}\"}}}}"),
    }
}

/// Waits until image `name` has phase `phase`; returns it.
pub fn wait_image(env: &Env, ns: &str, name: &str, phase: &str) -> Value {
    env.wait(&format!("VirtualImage {ns}/{name} {phase}"), || {
        let vi = env.get(VI, ns, name).ok_or("no VirtualImage")?;
        if vi["status"]["phase"] == phase {
            Ok(vi)
        } else {
            Err(vi["status"].to_string())
        }
    })
}

/// Waits until disk `name` has phase `phase`; returns it.
fn wait_disk_phase(env: &Env, ns: &str, name: &str, phase: &str) -> Value {
    env.wait(&format!("VirtualDisk {ns}/{name} {phase}"), || {
        let vd = env.get(VD, ns, name).ok_or("no VirtualDisk")?;
        if vd["status"]["phase"] == phase {
            Ok(vd)
        } else {
            Err(vd["status"].to_string())
        }
    })
}

/// The `Ready` condition's (status, reason, message).
fn ready(obj: &Value) -> (String, String, String) {
    cond(obj, "Ready").unwrap_or_default()
}

/// The registry's answer to `GET path` (`/v2/...`) with DVCR's credentials, into `out` when
/// given, else as text.
fn registry_get(env: &Env, path: &str, out: Option<&Path>) -> String {
    let d = &env.dvcr;
    let url = format!("https://{}{path}", d.address);
    let user = format!("{}:{}", d.username, d.password);
    let mut args = vec![
        "-sS",
        "--fail",
        "--cacert",
        d.ca_file.to_str().expect("utf-8"),
        "-u",
        &user,
        "-H",
        "Accept: application/vnd.oci.image.manifest.v1+json",
    ];
    if let Some(o) = out {
        args.extend(["-o", o.to_str().expect("utf-8")]);
    }
    args.push(&url);
    ok(&curl(&args))
}

/// The registry's status code for `GET path`.
fn registry_status(env: &Env, path: &str) -> String {
    let d = &env.dvcr;
    let user = format!("{}:{}", d.username, d.password);
    ok(&curl(&[
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--cacert",
        d.ca_file.to_str().expect("utf-8"),
        "-u",
        &user,
        "-H",
        "Accept: application/vnd.oci.image.manifest.v1+json",
        &format!("https://{}{path}", d.address),
    ]))
}

/// Reads image `reference` (`ADDRESS/NAME:TAG`) back through the registry API: checks the
/// layer's digest and returns the disk file the layer holds, extracted into `dir`.
fn read_back(env: &Env, reference: &str, dir: &Path) -> PathBuf {
    let rest = reference
        .strip_prefix(&format!("{}/", env.dvcr.address))
        .unwrap_or_else(|| panic!("{reference} is not in DVCR {}", env.dvcr.address));
    let (name, tag) = rest.rsplit_once(':').expect("a tag");
    let manifest = parse_json(&registry_get(env, &format!("/v2/{name}/manifests/{tag}"), None));
    assert_eq!(
        manifest["mediaType"], "application/vnd.oci.image.manifest.v1+json",
        "{manifest}"
    );
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "{manifest}");
    let digest = layers[0]["digest"].as_str().expect("digest");
    std::fs::create_dir_all(dir).expect("dir");
    let blob = dir.join("layer.tar");
    registry_get(env, &format!("/v2/{name}/blobs/{digest}"), Some(&blob));
    assert_eq!(format!("sha256:{}", sha256(&blob)), digest, "the layer's digest");
    assert_eq!(
        layers[0]["size"].as_u64(),
        Some(std::fs::metadata(&blob).expect("blob").len()),
        "{manifest}"
    );
    run(Command::new("tar").arg("-xf").arg(&blob).arg("-C").arg(dir));
    let files: Vec<PathBuf> = std::fs::read_dir(dir.join("disk"))
        .expect("disk/ in the layer")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files[0].clone()
}

/// The raw bytes of disk image `file` (converted by qemu-img), as a file in `dir`.
fn as_raw(file: &Path, dir: &Path) -> PathBuf {
    let out = dir.join(format!(
        "{}.raw",
        file.file_name().expect("name").to_string_lossy()
    ));
    run(Command::new("qemu-img")
        .args(["convert", "-O", "raw"])
        .arg(file)
        .arg(&out));
    out
}

/// A volume for claim `claim` at a directory of the test's, which the PV binder binds to it.
fn volume_for(env: &Env, ns: &str, claim: &str, size: &str) -> PathBuf {
    let dir = env.cp.dir.join("volumes").join(format!("{ns}-{claim}"));
    env.apply(&format!(
        "apiVersion: v1\nkind: PersistentVolume\nmetadata: {{name: pv-{ns}-{claim}}}\nspec:\n  capacity: {{storage: {size}}}\n  accessModes: [ReadWriteOnce]\n  storageClassName: local\n  persistentVolumeReclaimPolicy: Retain\n  hostPath: {{path: {}}}\n  claimRef: {{namespace: {ns}, name: {claim}}}\n",
        dir.display()
    ));
    dir
}

/// A disk of `size` filled from `data_source`.
fn vd_yaml(ns: &str, name: &str, size: &str, data_source: &str) -> String {
    format!(
        "apiVersion: virtualization.deckhouse.io/v1alpha2\nkind: VirtualDisk\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  persistentVolumeClaim: {{size: {size}, storageClassName: local}}\n  dataSource: {data_source}\n"
    )
}

/// The claim of disk `name`, once the disk names it.
fn disk_claim(env: &Env, ns: &str, name: &str) -> String {
    env.wait(&format!("VirtualDisk {ns}/{name} names its claim"), || {
        let vd = env.get(VD, ns, name).ok_or("no VirtualDisk")?;
        vd["status"]["target"]["persistentVolumeClaimName"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| vd["status"].to_string())
    })
}

/// An image from HTTP is converted, pushed to DVCR and read back intact; a disk is filled
/// from it; a VM gets the disk and an ISO image as a CD-ROM; deleting an image deletes it from
/// DVCR.
pub fn images(env: &Env) {
    let ns = env.namespace("image");
    let ns = ns.as_str();
    let work = env.cp.dir.join(format!("image-{ns}"));
    std::fs::create_dir_all(&work).expect("work dir");
    let src = env.files.dir.join(format!("{ns}-disk.raw"));
    raw_disk(&src, 16, 7);
    let src_sum = sha256(&src);
    let url = env.files.file_url(&format!("{ns}-disk.raw"));
    env.apply(&vi_yaml(ns, "ubuntu", &http_source(&url, Some(&src_sum))));
    let vi = wait_image(env, ns, "ubuntu", "Ready");
    let st = &vi["status"];
    let uid = vi["metadata"]["uid"].as_str().expect("uid");
    let reference = format!("{}/vi/{ns}/ubuntu:{uid}", env.dvcr.address);
    assert_eq!(st["target"]["registryURL"], reference.as_str(), "{vi}");
    assert_eq!(st["format"], "qcow2", "{vi}");
    assert_eq!(st["cdrom"], false, "{vi}");
    assert_eq!(st["progress"], "100%", "{vi}");
    assert_eq!(
        st["size"]["unpackedBytes"],
        (16u64 << 20).to_string().as_str(),
        "{vi}"
    );
    assert_eq!(st["size"]["unpacked"], "16.0Mi", "{vi}");
    assert!(
        cond_is(&vi, "DatasourceReady", "True") && cond_is(&vi, "Ready", "True"),
        "{vi}"
    );
    // What DVCR holds is the same disk, converted to qcow2.
    let disk = read_back(env, &reference, &work.join("ubuntu"));
    assert_eq!(disk.file_name().and_then(|n| n.to_str()), Some("disk.qcow2"));
    let info = parse_json(&run(Command::new("qemu-img")
        .args(["info", "--output=json"])
        .arg(&disk)));
    assert_eq!(info["format"], "qcow2", "{info}");
    assert_eq!(
        sha256(&as_raw(&disk, &work)),
        src_sum,
        "the disk in DVCR differs from the source"
    );
    assert_eq!(
        st["size"]["storedBytes"],
        std::fs::metadata(work.join("ubuntu/layer.tar"))
            .expect("layer")
            .len()
            .to_string()
            .as_str(),
        "{vi}"
    );
    // The importer's Pod and its copy of DVCR's credentials are gone once it is done.
    env.wait("the importer's Pod and Secret deleted", || {
        let name = format!("d8v-vi-importer-{uid}");
        match (env.get("pod", ns, &name), env.get("secret", ns, &name)) {
            (None, None) => Ok(()),
            (p, s) => Err(format!("pod {}, secret {}", p.is_some(), s.is_some())),
        }
    });

    // A disk filled from the image: its claim's volume holds the raw disk.
    env.apply(&vd_yaml(
        ns,
        "root",
        "64Mi",
        "{type: ObjectRef, objectRef: {kind: VirtualImage, name: ubuntu}}",
    ));
    let claim = disk_claim(env, ns, "root");
    let volume = volume_for(env, ns, &claim, "64Mi");
    let vd = wait_disk_phase(env, ns, "root", "Ready");
    assert_eq!(vd["status"]["progress"], "100%", "{vd}");
    assert!(cond_is(&vd, "Ready", "True"), "{vd}");
    assert_eq!(
        sha256(&volume.join("disk.img")),
        src_sum,
        "the disk's claim holds other bytes"
    );

    // An ISO image is kept as it is and given to a VM as a CD-ROM, beside the disk.
    let iso_file = env.files.dir.join(format!("{ns}-installer.iso"));
    iso(&iso_file, 64);
    env.apply(&vi_yaml(
        ns,
        "installer",
        &http_source(&env.files.file_url(&format!("{ns}-installer.iso")), None),
    ));
    let vi_iso = wait_image(env, ns, "installer", "Ready");
    assert_eq!(vi_iso["status"]["format"], "iso", "{vi_iso}");
    assert_eq!(vi_iso["status"]["cdrom"], true, "{vi_iso}");
    let iso_ref = vi_iso["status"]["target"]["registryURL"]
        .as_str()
        .expect("registryURL")
        .to_owned();
    let stored = read_back(env, &iso_ref, &work.join("installer"));
    assert_eq!(sha256(&stored), sha256(&iso_file), "an ISO is stored as it is");

    // Their phases in /metrics.
    let metrics = env.metrics();
    for (metric, obj) in [("virtualimage", &vi_iso), ("virtualdisk", &vd)] {
        let (name, uid) = (&obj["metadata"]["name"], &obj["metadata"]["uid"]);
        let series = format!(
            "d8_virtualization_{metric}_status_phase{{name={name},namespace=\"{ns}\",uid={uid},phase=\"Ready\"}} 1"
        );
        assert!(
            metrics.lines().any(|l| l == series),
            "{series} not in:\n{metrics}"
        );
    }

    // An image kept in a claim: imported into DVCR, copied into its claim, gone from DVCR.
    env.apply(&vi_yaml(ns, "base", &http_source(&url, None)).replace(
        "storage: ContainerRegistry",
        "storage: PersistentVolumeClaim\n  persistentVolumeClaim: {storageClassName: local}",
    ));
    let base_uid = env.wait("VirtualImage base has a uid", || {
        env.get(VI, ns, "base")
            .and_then(|v| v["metadata"]["uid"].as_str().map(str::to_owned))
            .ok_or_else(|| "no uid".to_owned())
    });
    let base_claim = format!("vi-base-{base_uid}");
    env.wait("the image's claim", || {
        env.get("pvc", ns, &base_claim)
            .ok_or_else(|| "no claim".to_owned())
    });
    let base_volume = volume_for(env, ns, &base_claim, "16Mi");
    let base = wait_image(env, ns, "base", "Ready");
    assert_eq!(
        base["status"]["target"]["persistentVolumeClaimName"],
        base_claim.as_str(),
        "{base}"
    );
    assert!(base["status"]["target"]["registryURL"].is_null(), "{base}");
    assert_eq!(
        sha256(&base_volume.join("disk.img")),
        src_sum,
        "the image's claim holds other bytes"
    );
    assert_eq!(
        registry_status(env, &format!("/v2/vi/{ns}/base/manifests/{base_uid}")),
        "404"
    );

    env.apply(
        &(vm_yaml(ns, "vm", "Manual", "256Mi")
            + "  blockDeviceRefs:\n  - {kind: VirtualDisk, name: root}\n  - {kind: VirtualImage, name: installer}\n  - {kind: VirtualImage, name: base}\n"),
    );
    let up = env.wait(
        "the KubeVirt VM with the disk, the CD-ROM and the image claim",
        || {
            let up = env.get(UP_KVVM, ns, "vm").ok_or("no KubeVirt VM")?;
            if up["spec"]["template"]["spec"]["volumes"]
                .as_array()
                .is_some_and(|v| v.len() == 4)
            {
                Ok(up)
            } else {
                Err(up["spec"].to_string())
            }
        },
    );
    let t = &up["spec"]["template"]["spec"];
    let disks = &t["domain"]["devices"]["disks"];
    assert_eq!(disks[0]["name"], "vd-root", "{t}");
    assert_eq!(disks[0]["disk"]["bus"], "virtio", "{t}");
    assert_eq!(disks[1]["name"], "vi-installer", "{t}");
    assert_eq!(disks[1]["cdrom"]["bus"], "sata", "{t}");
    assert_eq!(
        t["volumes"][0]["persistentVolumeClaim"]["claimName"],
        claim.as_str(),
        "{t}"
    );
    assert_eq!(t["volumes"][1]["containerDisk"]["image"], iso_ref.as_str(), "{t}");
    assert_eq!(disks[2]["name"], "vi-base", "{t}");
    assert_eq!(
        t["volumes"][2]["persistentVolumeClaim"],
        serde_json::json!({"claimName": base_claim, "readOnly": true}),
        "{t}"
    );

    // Deleting an image deletes it from DVCR.
    let path = format!("/v2/vi/{ns}/ubuntu/manifests/{uid}");
    assert_eq!(registry_status(env, &path), "200");
    ok(&env
        .cp
        .kubectl(&["delete", VI, "ubuntu", "-n", ns, "--wait=true", "--timeout=60s"]));
    assert_eq!(registry_status(env, &path), "404", "the image is still in DVCR");
}

/// An image uploaded by the user: `WaitForUserUpload` with the upload URL, a cut upload leaves
/// it waiting, a whole one makes it Ready.
pub fn upload(env: &Env) {
    let ns = env.namespace("upload");
    let ns = ns.as_str();
    let work = env.cp.dir.join(format!("upload-{ns}"));
    std::fs::create_dir_all(&work).expect("work dir");
    let raw = work.join("disk.raw");
    raw_disk(&raw, 16, 11);
    let qcow = work.join("disk.qcow2");
    run(Command::new("qemu-img")
        .args(["convert", "-O", "qcow2"])
        .arg(&raw)
        .arg(&qcow));
    env.apply(&vi_yaml(ns, "uploaded", "{type: Upload}"));
    let vi = wait_image(env, ns, "uploaded", "WaitForUserUpload");
    let uid = vi["metadata"]["uid"].as_str().expect("uid").to_owned();
    let pod = format!("d8v-vi-uploader-{uid}");
    assert_eq!(
        vi["status"]["imageUploadURLs"]["inCluster"],
        format!("https://{pod}.{ns}.svc/upload").as_str(),
        "{vi}"
    );
    let (_, reason, message) = ready(&vi);
    assert_eq!(reason, "WaitForUserUpload", "{vi}");
    assert!(message.contains("curl -T"), "{vi}");
    assert!(env.get("service", ns, &pod).is_some(), "the uploader's Service");
    // Cluster IPs do not route here: the upload goes to the port the kubelet double gave the
    // uploader.
    let port = env.wait("the uploader's port", || {
        env.kubelet
            .port(ns, &pod, 8443)
            .ok_or_else(|| "not running".to_owned())
    });
    let url = format!("https://127.0.0.1:{port}/upload");
    let ca = env.cp.dir.join("webhook-ca.crt");
    let ca = ca.to_str().expect("utf-8");
    // Cut half-way: at 1 MiB/s curl gives up after 2 s of 16 MiB.
    let cut = curl(&[
        "-sS",
        "--cacert",
        ca,
        "-T",
        qcow.to_str().expect("utf-8"),
        "--limit-rate",
        "1M",
        "--max-time",
        "2",
        &url,
    ]);
    assert!(!cut.status.success(), "the cut upload finished");
    std::thread::sleep(std::time::Duration::from_secs(1));
    let vi = wait_image(env, ns, "uploaded", "WaitForUserUpload");
    assert!(vi["status"]["target"].is_null(), "{vi}");
    let out = ok(&curl(&[
        "-sS",
        "--fail",
        "--cacert",
        ca,
        "-T",
        qcow.to_str().expect("utf-8"),
        &url,
    ]));
    assert!(out.contains("qcow2"), "{out}");
    let vi = wait_image(env, ns, "uploaded", "Ready");
    assert!(vi["status"]["imageUploadURLs"].is_null(), "{vi}");
    let reference = vi["status"]["target"]["registryURL"]
        .as_str()
        .expect("registryURL")
        .to_owned();
    let stored = read_back(env, &reference, &work.join("read"));
    assert_eq!(
        sha256(&stored),
        sha256(&qcow),
        "a qcow2 upload is stored as it is"
    );
}

/// Each way an import fails ends `Failed` with a message saying why; a deleted importer Pod
/// is started again; a disk smaller than its image fails.
pub fn import_failures(env: &Env) {
    let ns = env.namespace("import-fail");
    let ns = ns.as_str();
    let good = env.files.dir.join(format!("{ns}-disk.raw"));
    raw_disk(&good, 16, 3);
    std::fs::write(
        env.files.dir.join(format!("{ns}-page.html")),
        "<!DOCTYPE html><html><body>not a disk</body></html>\n",
    )
    .expect("page");
    let closed = free_port();
    let cases = [
        (
            "unreachable",
            http_source(&format!("http://127.0.0.1:{closed}/disk.img"), None),
            format!("127.0.0.1:{closed}"),
        ),
        (
            "checksum",
            http_source(
                &env.files.file_url(&format!("{ns}-disk.raw")),
                Some(&"0".repeat(64)),
            ),
            "checksum mismatch".to_owned(),
        ),
        (
            "not-an-image",
            http_source(&env.files.file_url(&format!("{ns}-page.html")), None),
            "not a disk image".to_owned(),
        ),
        (
            "missing",
            http_source(&env.files.file_url(&format!("{ns}-nothing.img")), None),
            "404".to_owned(),
        ),
    ];
    for (name, source, _) in &cases {
        env.apply(&vi_yaml(ns, name, source));
    }
    for (name, _, why) in &cases {
        let vi = wait_image(env, ns, name, "Failed");
        let (status, reason, message) = ready(&vi);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", "ProvisioningFailed"),
            "{vi}"
        );
        assert!(
            message.contains(why.as_str()),
            "{name}: {message:?} does not say {why:?}"
        );
        assert!(vi["status"]["target"].is_null(), "{vi}");
    }

    // A registry that refuses the credentials: a ContainerImage source with a wrong password.
    let auth = format!(
        "{{\"auths\":{{\"{}\":{{\"auth\":\"{}\"}}}}}}",
        env.dvcr.address,
        base64_encode(format!("{}:wrong", env.dvcr.username).as_bytes())
    );
    let auth_file = env.cp.dir.join(format!("{ns}-bad-auth.json"));
    std::fs::write(&auth_file, auth).expect("auth file");
    ok(&env.cp.kubectl(&[
        "create",
        "secret",
        "generic",
        "bad-pull",
        "-n",
        ns,
        "--type=kubernetes.io/dockerconfigjson",
        &format!("--from-file=.dockerconfigjson={}", auth_file.display()),
    ]));
    let ca = base64_encode(&std::fs::read(&env.dvcr.ca_file).expect("DVCR CA"));
    env.apply(&vi_yaml(
        ns,
        "refused",
        &format!(
            "{{type: ContainerImage, containerImage: {{image: \"{}/vi/x/y:z\", imagePullSecret: {{name: bad-pull}}, caBundle: \"{ca}\"}}}}",
            env.dvcr.address
        ),
    ));
    let vi = wait_image(env, ns, "refused", "Failed");
    let (_, _, message) = ready(&vi);
    assert!(message.contains("refused the credentials"), "{message}");

    // A deleted importer Pod is created again, and the import still succeeds.
    env.apply(&vi_yaml(
        ns,
        "retried",
        &http_source(&env.files.file_url(&format!("stall/{ns}-disk.raw")), None),
    ));
    let vi = wait_image(env, ns, "retried", "Provisioning");
    let pod = format!("d8v-vi-importer-{}", vi["metadata"]["uid"].as_str().expect("uid"));
    let first = env.wait("the importer running", || {
        let p = env.get("pod", ns, &pod).ok_or("no Pod")?;
        if p["status"]["phase"] == "Running" {
            Ok(p["metadata"]["uid"].clone())
        } else {
            Err(p["status"].to_string())
        }
    });
    ok(&env.cp.kubectl(&["delete", "pod", &pod, "-n", ns, "--wait=false"]));
    env.wait("the importer Pod created again", || {
        let p = env.get("pod", ns, &pod).ok_or("no Pod")?;
        if p["metadata"]["uid"] != first {
            Ok(())
        } else {
            Err("the first Pod".to_owned())
        }
    });
    env.files.release(&format!("{ns}-disk.raw"));
    let vi = wait_image(env, ns, "retried", "Ready");
    assert_eq!(vi["status"]["format"], "qcow2", "{vi}");

    // A disk smaller than the image it is filled from fails.
    env.apply(&vd_yaml(
        ns,
        "small",
        "8Mi",
        "{type: ObjectRef, objectRef: {kind: VirtualImage, name: retried}}",
    ));
    let claim = disk_claim(env, ns, "small");
    volume_for(env, ns, &claim, "8Mi");
    let vd = wait_disk_phase(env, ns, "small", "Failed");
    let (_, reason, message) = ready(&vd);
    assert_eq!(reason, "ProvisioningFailed", "{vd}");
    assert!(message.contains("larger than the disk"), "{message}");

    // A disk naming an image that does not exist waits, saying so.
    env.apply(&vd_yaml(
        ns,
        "orphan",
        "64Mi",
        "{type: ObjectRef, objectRef: {kind: VirtualImage, name: absent}}",
    ));
    let vd = wait_disk_phase(env, ns, "orphan", "Pending");
    let (status, reason, message) = cond(&vd, "DatasourceReady").expect("DatasourceReady");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "VirtualImageNotFound"),
        "{vd}"
    );
    assert!(message.contains("VirtualImage absent not found"), "{message}");
}

fn base64_encode(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(b)
}
