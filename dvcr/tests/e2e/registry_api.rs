//! The registry seen through its API with curl: manifests and blobs read back, images pushed
//! by hand (Docker v2, gzip layers, indexes).

use super::*;

impl Env {
    pub(crate) fn dvcr(&self) -> &Dvcr {
        self.dvcr.as_ref().expect("running")
    }

    /// A new directory under the environment's.
    pub(crate) fn tmp(&self, tag: &str) -> PathBuf {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = self.root.join(format!("{tag}-{n}"));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    pub(crate) fn url(&self, name: &str) -> String {
        format!("{}/{name}", self.files.url)
    }

    pub(crate) fn dest_registry(&self, repo: &str) -> Vec<(&'static str, String)> {
        vec![
            ("DESTINATION", "registry".into()),
            ("DESTINATION_IMAGE", format!("{}/{repo}:v1", self.dvcr().address)),
            ("DESTINATION_AUTH_FILE", path(&self.dvcr().auth_file).into()),
            ("DESTINATION_CA_FILE", path(&self.dvcr().ca_file).into()),
        ]
    }

    pub(crate) fn source_registry(&self, repo: &str) -> Vec<(&'static str, String)> {
        vec![
            ("SOURCE", "registry".into()),
            ("SOURCE_IMAGE", format!("{}/{repo}:v1", self.dvcr().address)),
            ("SOURCE_AUTH_FILE", path(&self.dvcr().auth_file).into()),
            ("SOURCE_CA_FILE", path(&self.dvcr().ca_file).into()),
        ]
    }

    pub(crate) fn http(&self, name: &str) -> Vec<(&'static str, String)> {
        vec![("SOURCE", "http".into()), ("SOURCE_URL", self.url(name))]
    }

    /// curl against the registry with its credentials: (status, body).
    pub(crate) fn registry(&self, args: &[&str]) -> (String, Vec<u8>) {
        let out = self.tmp("curl").join("body");
        let user = format!("{}:{}", self.dvcr().username, self.dvcr().password);
        let o = Command::new("curl")
            .args([
                "-sS",
                "--cacert",
                path(&self.dvcr().ca_file),
                "-u",
                &user,
                "-o",
                path(&out),
                "-w",
                "%{http_code}",
            ])
            .args(args)
            .output()
            .expect("curl runs");
        let body = std::fs::read(&out).unwrap_or_default();
        (String::from_utf8_lossy(&o.stdout).into_owned(), body)
    }

    pub(crate) fn manifest(&self, repo: &str) -> Option<serde_json::Value> {
        let url = format!("{}/v2/{repo}/manifests/v1", self.dvcr().url());
        let (status, body) =
            self.registry(&["-H", "Accept: application/vnd.oci.image.manifest.v1+json", &url]);
        match status.as_str() {
            "200" => Some(serde_json::from_slice(&body).unwrap()),
            "404" => None,
            s => panic!("GET manifest of {repo}: {s}: {}", String::from_utf8_lossy(&body)),
        }
    }

    /// The one disk file of the image's layer, written to `dst`: its name in the tar.
    pub(crate) fn disk_of(&self, repo: &str, message: &TerminationMessage, dst: &Path) -> String {
        let m = self.manifest(repo).expect("the image was pushed");
        assert_eq!(m["mediaType"], "application/vnd.oci.image.manifest.v1+json");
        let manifest_bytes = self
            .registry(&[
                "-H",
                "Accept: application/vnd.oci.image.manifest.v1+json",
                &format!("{}/v2/{repo}/manifests/v1", self.dvcr().url()),
            ])
            .1;
        let digest = format!(
            "sha256:{}",
            hex(ring::digest::digest(&ring::digest::SHA256, &manifest_bytes).as_ref())
        );
        assert_eq!(message.digest.as_deref(), Some(digest.as_str()));
        let layers = m["layers"].as_array().unwrap();
        assert_eq!(layers.len(), 1);
        assert_eq!(layers[0]["mediaType"], "application/vnd.oci.image.layer.v1.tar");
        let layer_digest = layers[0]["digest"].as_str().unwrap();
        let (status, blob) = self.registry(&[
            "-L",
            &format!("{}/v2/{repo}/blobs/{layer_digest}", self.dvcr().url()),
        ]);
        assert_eq!(status, "200");
        let actual = format!(
            "sha256:{}",
            hex(ring::digest::digest(&ring::digest::SHA256, &blob).as_ref())
        );
        assert_eq!(actual, layer_digest, "the blob's sha256 is its digest");
        assert_eq!(layers[0]["size"].as_u64(), Some(blob.len() as u64));
        assert_eq!(message.stored_size, Some(blob.len() as u64));
        let config_digest = m["config"]["digest"].as_str().unwrap();
        let (_, config) = self.registry(&[&format!("{}/v2/{repo}/blobs/{config_digest}", self.dvcr().url())]);
        let config: serde_json::Value = serde_json::from_slice(&config).unwrap();
        assert_eq!(config["architecture"], "amd64");
        assert_eq!(config["rootfs"]["diff_ids"][0], layer_digest);

        let mut archive = tar::Archive::new(&blob[..]);
        let mut names = Vec::new();
        for entry in archive.entries().unwrap() {
            let mut entry = entry.unwrap();
            let name = entry.path().unwrap().display().to_string();
            let h = entry.header();
            assert_eq!(
                (h.uid().unwrap(), h.gid().unwrap(), h.mtime().unwrap()),
                (107, 107, 0),
                "{name}"
            );
            if h.entry_type().is_file() {
                assert_eq!(h.mode().unwrap(), 0o440);
                let mut out = std::fs::File::create(dst).unwrap();
                std::io::copy(&mut entry, &mut out).unwrap();
            }
            names.push(name);
        }
        assert_eq!(names.len(), 2, "{names:?}");
        assert_eq!(names[0], "disk/");
        names.pop().unwrap()
    }
}

impl Env {
    /// Pushes a blob with curl (monolithic upload): its digest.
    pub(crate) fn push_blob(&self, repo: &str, bytes: &[u8]) -> String {
        let digest = format!(
            "sha256:{}",
            hex(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref())
        );
        let work = self.tmp("blob");
        let (file, headers) = (work.join("blob"), work.join("headers"));
        std::fs::write(&file, bytes).unwrap();
        let url = format!("{}/v2/{repo}/blobs/uploads/", self.dvcr().url());
        let (status, _) = self.registry(&["-X", "POST", "-D", path(&headers), &url]);
        assert_eq!(status, "202");
        let headers = std::fs::read_to_string(&headers).unwrap();
        let location = headers
            .lines()
            .find_map(|l| {
                l.strip_prefix("Location: ")
                    .or_else(|| l.strip_prefix("location: "))
            })
            .unwrap()
            .trim()
            .to_owned();
        let location = if location.starts_with('/') {
            format!("{}{location}", self.dvcr().url())
        } else {
            location
        };
        let sep = if location.contains('?') { '&' } else { '?' };
        let put = format!("{location}{sep}digest={digest}");
        let (status, body) = self.registry(&[
            "-X",
            "PUT",
            // Not curl's form type: the registry would read the body as a form.
            "-H",
            "Content-Type: application/octet-stream",
            "--data-binary",
            &format!("@{}", path(&file)),
            &put,
        ]);
        assert_eq!(status, "201", "{}", String::from_utf8_lossy(&body));
        digest
    }

    pub(crate) fn push_manifest(
        &self,
        repo: &str,
        tag: &str,
        media_type: &str,
        manifest: &serde_json::Value,
    ) -> String {
        let bytes = serde_json::to_vec(manifest).unwrap();
        let file = self.tmp("manifest").join("m.json");
        std::fs::write(&file, &bytes).unwrap();
        let url = format!("{}/v2/{repo}/manifests/{tag}", self.dvcr().url());
        let ct = format!("Content-Type: {media_type}");
        let (status, body) = self.registry(&[
            "-X",
            "PUT",
            "-H",
            &ct,
            "--data-binary",
            &format!("@{}", path(&file)),
            &url,
        ]);
        assert_eq!(status, "201", "{}", String::from_utf8_lossy(&body));
        format!(
            "sha256:{}",
            hex(ring::digest::digest(&ring::digest::SHA256, &bytes).as_ref())
        )
    }

    /// A Docker v2 image whose gzip layer holds `files` (name, bytes): its manifest's digest and size.
    pub(crate) fn push_docker_image(
        &self,
        repo: &str,
        tag: &str,
        files: &[(&str, &[u8])],
    ) -> (String, usize) {
        let mut tar = tar::Builder::new(Vec::new());
        let mut dir = tar::Header::new_gnu();
        dir.set_entry_type(tar::EntryType::Directory);
        dir.set_mode(0o755);
        dir.set_size(0);
        tar.append_data(&mut dir, "./disk/", std::io::empty()).unwrap();
        for (name, data) in files {
            let mut h = tar::Header::new_gnu();
            h.set_mode(0o644);
            h.set_size(data.len() as u64);
            tar.append_data(&mut h, name, *data).unwrap();
        }
        let tar = tar.into_inner().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &tar).unwrap();
        let gz = gz.finish().unwrap();
        let layer = self.push_blob(repo, &gz);
        let config = br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#;
        let config_digest = self.push_blob(repo, config);
        let media = "application/vnd.docker.distribution.manifest.v2+json";
        let m = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": media,
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": config.len(), "digest": config_digest},
            "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": gz.len(), "digest": layer}],
        });
        let size = serde_json::to_vec(&m).unwrap().len();
        (self.push_manifest(repo, tag, media, &m), size)
    }
}
