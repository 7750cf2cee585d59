//! `virtualization-dvcr import`: http, registry and file sources into the registry and
//! directories, and the ways it fails.

use super::*;

#[test]
fn http_raw_to_registry_is_qcow2() {
    let env = env();
    let mut vars = env.http("disk.raw");
    vars.extend(env.dest_registry("vi/ns/raw"));
    let m = succeeds(import(&vars));
    assert_eq!(m.format.as_deref(), Some("qcow2"));
    assert_eq!(m.source_format.as_deref(), Some("raw"));
    assert_eq!(m.unpacked_size, Some(12 * MIB as u64));
    assert!(m.average_speed.unwrap_or(0) > 0);
    let work = env.tmp("raw");
    let disk = work.join("disk.qcow2");
    assert_eq!(env.disk_of("vi/ns/raw", &m, &disk), "disk/disk.qcow2");
    assert_same_as_source(&env, &disk);
    assert_eq!(m.sha256, Some(sha256_file(&disk)));
    // The same image again: the layer is there already, the digest is the same.
    let again = succeeds(import(&vars));
    assert_eq!(again.digest, m.digest);
    assert_eq!(again.sha256, m.sha256);
}

#[test]
fn delete_image_removes_the_manifest() {
    let env = env();
    let mut vars = env.http("disk.qcow2");
    vars.extend(env.dest_registry("vi/ns/deleted"));
    succeeds(import(&vars));
    assert!(env.manifest("vi/ns/deleted").is_some());
    let image: virtualization_dvcr::ImageReference = format!("{}/vi/ns/deleted:v1", env.dvcr().address)
        .parse()
        .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let delete = || {
        rt.block_on(virtualization_dvcr::delete_image_with_auth_file(
            &image,
            Some(&env.dvcr().auth_file),
            Some(&env.dvcr().ca_file),
        ))
    };
    delete().expect("deleted");
    assert!(env.manifest("vi/ns/deleted").is_none());
    // Gone already: fine.
    delete().expect("deleting again is fine");
    // Wrong credentials: the registry's refusal.
    let creds = virtualization_dvcr::Credentials {
        username: "admin".into(),
        password: "wrong".into(),
    };
    let e = rt
        .block_on(virtualization_dvcr::delete_image(
            &image,
            Some(creds),
            Some(&env.dvcr().ca_file),
        ))
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "registry {} refused the credentials (401 Unauthorized)",
            env.dvcr().address
        )
    );
}

#[test]
fn http_qcow2_with_checksums_is_stored_unchanged() {
    let env = env();
    let src = env.dir.join("disk.qcow2");
    let sha = sha256_file(&src);
    // Through a redirect, with both checksums.
    let md5 = {
        let o = Command::new("md5sum").arg(&src).output().unwrap();
        String::from_utf8_lossy(&o.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .to_owned()
    };
    let mut vars = env.http("redirect/disk.qcow2");
    vars.push(("SOURCE_SHA256", sha.to_uppercase()));
    vars.push(("SOURCE_MD5", md5));
    vars.extend(env.dest_registry("vi/ns/qcow2"));
    let m = succeeds(import(&vars));
    assert_eq!(m.format.as_deref(), Some("qcow2"));
    assert_eq!(m.source_format.as_deref(), Some("qcow2"));
    assert_eq!(m.sha256.as_deref(), Some(sha.as_str()));
    let disk = env.tmp("qcow2").join("d");
    env.disk_of("vi/ns/qcow2", &m, &disk);
    assert_eq!(sha256_file(&disk), sha);
}

#[test]
fn vmdk_is_converted_to_qcow2() {
    let env = env();
    let vmdk = env.dir.join("disk.vmdk");
    qemu(&[
        "convert",
        "-f",
        "raw",
        "-O",
        "vmdk",
        path(&env.dir.join("disk.raw")),
        path(&vmdk),
    ]);
    let mut vars = env.http("disk.vmdk");
    vars.extend(env.dest_registry("vi/ns/vmdk"));
    let m = succeeds(import(&vars));
    assert_eq!(m.format.as_deref(), Some("qcow2"));
    assert_eq!(m.source_format.as_deref(), Some("vmdk"));
    let disk = env.tmp("vmdk").join("d");
    env.disk_of("vi/ns/vmdk", &m, &disk);
    assert_same_as_source(&env, &disk);
}

#[test]
fn qcow2_with_a_backing_file_is_refused() {
    let env = env();
    let overlay = env.dir.join("overlay.qcow2");
    let _ = std::fs::remove_file(&overlay);
    qemu(&[
        "create",
        "-f",
        "qcow2",
        "-b",
        "disk.qcow2",
        "-F",
        "qcow2",
        path(&overlay),
    ]);
    let mut vars = env.http("overlay.qcow2");
    vars.extend(env.dest_registry("vi/ns/overlay"));
    fails(
        import(&vars),
        "not a disk image: the qcow2 image has a backing file",
    );
    assert!(env.manifest("vi/ns/overlay").is_none());
}

#[test]
fn checksum_mismatch_is_refused() {
    let env = env();
    let mut vars = env.http("disk.qcow2");
    vars.push(("SOURCE_SHA256", "0".repeat(64)));
    vars.extend(env.dest_registry("vi/ns/mismatch"));
    let actual = sha256_file(&env.dir.join("disk.qcow2"));
    fails(
        import(&vars),
        &format!(
            "checksum mismatch: sha256 of the downloaded file is {actual}, expected {}",
            "0".repeat(64)
        ),
    );
    assert!(env.manifest("vi/ns/mismatch").is_none(), "nothing pushed");
}

#[test]
fn unreachable_url_fails() {
    let env = env();
    let port = free_port();
    let mut vars = vec![
        ("SOURCE", "http".into()),
        ("SOURCE_URL", format!("http://127.0.0.1:{port}/disk.raw")),
    ];
    vars.extend(env.dest_registry("vi/ns/unreachable"));
    fails(import(&vars), &format!("GET http://127.0.0.1:{port}/disk.raw"));
    assert!(env.manifest("vi/ns/unreachable").is_none());
}

#[test]
fn not_found_url_fails() {
    let env = env();
    let mut vars = env.http("missing.img");
    vars.extend(env.dest_registry("vi/ns/missing"));
    fails(
        import(&vars),
        &format!("GET {} answered 404 Not Found", env.url("missing.img")),
    );
    assert!(env.manifest("vi/ns/missing").is_none());
}

#[test]
fn html_page_is_not_a_disk_image() {
    let env = env();
    let mut vars = env.http("page.html");
    vars.extend(env.dest_registry("vi/ns/html"));
    fails(import(&vars), "not a disk image: ");
    assert!(env.manifest("vi/ns/html").is_none());
}

#[test]
fn wrong_credentials_are_refused() {
    let env = env();
    let bad = env.tmp("bad-auth").join("auth.json");
    std::fs::write(
        &bad,
        format!(
            r#"{{"auths":{{"{}":{{"username":"admin","password":"wrong"}}}}}}"#,
            env.dvcr().address
        ),
    )
    .unwrap();
    let mut vars = env.http("disk.qcow2");
    vars.extend(env.dest_registry("vi/ns/denied"));
    vars.retain(|(k, _)| *k != "DESTINATION_AUTH_FILE");
    vars.push(("DESTINATION_AUTH_FILE", path(&bad).into()));
    fails(
        import(&vars),
        &format!(
            "registry {} refused the credentials (401 Unauthorized)",
            env.dvcr().address
        ),
    );
    assert!(env.manifest("vi/ns/denied").is_none());
}

#[test]
fn registry_to_dir_is_the_original_raw() {
    let env = env();
    let mut vars = env.http("disk.raw");
    vars.extend(env.dest_registry("vi/ns/pvc"));
    succeeds(import(&vars));
    let pvc = env.tmp("pvc");
    let mut vars = env.source_registry("vi/ns/pvc");
    vars.push(("DESTINATION", "dir".into()));
    vars.push(("DESTINATION_DIR", path(&pvc).into()));
    let m = succeeds(import(&vars));
    assert_eq!(m.format.as_deref(), Some("raw"));
    assert_eq!(m.source_format.as_deref(), Some("qcow2"));
    assert_eq!(m.digest, None);
    let disk = pvc.join("disk.img");
    assert_eq!(
        std::fs::read(&disk).unwrap(),
        std::fs::read(env.dir.join("disk.raw")).unwrap()
    );
    assert_eq!(m.sha256, Some(sha256_file(&disk)));
    assert_eq!(m.stored_size, Some(12 * MIB as u64));
    let names: Vec<_> = std::fs::read_dir(&pvc)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec!["disk.img"], "no temporary file left");

    // The file source reads the directory back.
    let pvc2 = env.tmp("pvc2");
    let vars = vec![
        ("SOURCE", "file".into()),
        ("SOURCE_PATH", path(&pvc).into()),
        ("DESTINATION", "dir".into()),
        ("DESTINATION_DIR", path(&pvc2).into()),
    ];
    let m2 = succeeds(import(&vars));
    assert_eq!(m2.sha256, m.sha256);
}

#[test]
fn container_disk_index_with_gzip_layers_to_dir() {
    let env = env();
    let repo = "containerdisks/fedora";
    let raw = std::fs::read(env.dir.join("disk.raw")).unwrap();
    let (amd64, amd64_size) = env.push_docker_image(
        repo,
        "amd64",
        &[("./README", b"not the disk"), ("./disk/disk.img", &raw)],
    );
    let (arm64, arm64_size) = env.push_docker_image(repo, "arm64", &[("./README", b"no disk here")]);
    let media = "application/vnd.oci.image.index.v1+json";
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": media,
        "manifests": [
            {"mediaType": "application/vnd.docker.distribution.manifest.v2+json", "digest": arm64, "size": arm64_size,
             "platform": {"architecture": "arm64", "os": "linux"}},
            {"mediaType": "application/vnd.docker.distribution.manifest.v2+json", "digest": amd64, "size": amd64_size,
             "platform": {"architecture": "amd64", "os": "linux"}},
        ],
    });
    env.push_manifest(repo, "v1", media, &index);
    let pvc = env.tmp("containerdisk");
    let mut vars = env.source_registry(repo);
    vars.push(("DESTINATION", "dir".into()));
    vars.push(("DESTINATION_DIR", path(&pvc).into()));
    let m = succeeds(import(&vars));
    assert_eq!(m.format.as_deref(), Some("raw"));
    assert_eq!(std::fs::read(pvc.join("disk.img")).unwrap(), raw);

    // The arm64 image alone has no disk.
    let mut vars = env.source_registry(repo);
    vars.retain(|(k, _)| *k != "SOURCE_IMAGE");
    vars.push(("SOURCE_IMAGE", format!("{}/{repo}@{arm64}", env.dvcr().address)));
    vars.push(("DESTINATION", "dir".into()));
    vars.push(("DESTINATION_DIR", path(&env.tmp("nodisk")).into()));
    fails(
        import(&vars),
        "has no file under disk/ (not a containerDisk image)",
    );
}

#[test]
fn dir_smaller_than_the_image_is_refused() {
    let env = env();
    let pvc = env.tmp("small");
    let mut vars = env.http("disk.qcow2");
    vars.push(("DESTINATION", "dir".into()));
    vars.push(("DESTINATION_DIR", path(&pvc).into()));
    vars.push(("DESTINATION_MAX_SIZE", (8 * MIB).to_string()));
    fails(
        import(&vars),
        &format!(
            "the image's virtual size {} bytes is larger than the disk's {} bytes",
            12 * MIB,
            8 * MIB
        ),
    );
    assert_eq!(std::fs::read_dir(&pvc).unwrap().count(), 0);
}

#[test]
fn iso_is_stored_as_iso() {
    let env = env();
    let mut vars = env.http("disk.iso");
    vars.extend(env.dest_registry("vi/ns/iso"));
    let m = succeeds(import(&vars));
    assert_eq!(m.format.as_deref(), Some("iso"));
    assert_eq!(m.source_format.as_deref(), Some("iso"));
    let disk = env.tmp("iso").join("d");
    assert_eq!(env.disk_of("vi/ns/iso", &m, &disk), "disk/disk.iso");
    assert_eq!(std::fs::read(&disk).unwrap(), iso_bytes_of(&env));
    // And into a directory, as is.
    let pvc = env.tmp("iso-pvc");
    let mut vars = env.source_registry("vi/ns/iso");
    vars.push(("DESTINATION", "dir".into()));
    vars.push(("DESTINATION_DIR", path(&pvc).into()));
    let m = succeeds(import(&vars));
    assert_eq!(m.format.as_deref(), Some("iso"));
    assert_eq!(std::fs::read(pvc.join("disk.img")).unwrap(), iso_bytes_of(&env));
}

fn iso_bytes_of(env: &Env) -> Vec<u8> {
    std::fs::read(env.dir.join("disk.iso")).unwrap()
}

/// `qemu-img compare` of the qcow2 `disk` with the source raw disk says they are identical.
fn assert_same_as_source(env: &Env, disk: &std::path::Path) {
    let source = env.dir.join("disk.raw");
    let out = qemu(&["compare", "-f", "qcow2", "-F", "raw", path(disk), path(&source)]);
    assert!(out.contains("Images are identical"), "{out}");
}
