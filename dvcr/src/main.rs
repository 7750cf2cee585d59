//! `virtualization-dvcr`: imports disk images into DVCR or a PVC directory (`import`), or
//! receives one a user uploads (`upload`). Configured by environment variables (or the same
//! settings as flags); see the crate's README.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use virtualization_dvcr::{Destination, ImageReference, Import, Source, TerminationMessage, upload};

#[derive(Parser)]
#[command(
    name = "virtualization-dvcr",
    version,
    about = "Disk images into DVCR or a PVC directory"
)]
struct Cli {
    /// Where the one-line JSON result is written (kubelet's termination message).
    #[arg(
        long,
        env = "TERMINATION_MESSAGE_PATH",
        default_value = "/dev/termination-log",
        global = true
    )]
    termination_message_path: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Fetch an image (http, registry or file), convert it where needed, store it.
    Import(ImportArgs),
    /// Receive an image over HTTPS (PUT or POST /upload), convert it where needed, store it.
    Upload(UploadArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum SourceKind {
    Http,
    Registry,
    File,
}

#[derive(Clone, Copy, ValueEnum)]
enum DestinationKind {
    Registry,
    Dir,
}

#[derive(Args)]
struct ImportArgs {
    /// Where the image comes from.
    #[arg(long, env = "SOURCE")]
    source: SourceKind,
    /// http: the URL (http or https).
    #[arg(long, env = "SOURCE_URL")]
    source_url: Option<String>,
    /// http: the expected SHA-256 of the file (hex).
    #[arg(long, env = "SOURCE_SHA256")]
    source_sha256: Option<String>,
    /// http: the expected MD5 of the file (hex).
    #[arg(long, env = "SOURCE_MD5")]
    source_md5: Option<String>,
    /// http, registry: a PEM bundle trusted beside the OS roots.
    #[arg(long, env = "SOURCE_CA_FILE")]
    source_ca_file: Option<PathBuf>,
    /// registry: the image (`host[:port]/path:tag` or `...@sha256:...`).
    #[arg(long, env = "SOURCE_IMAGE")]
    source_image: Option<String>,
    /// registry: a `.dockerconfigjson` file with the registry's credentials.
    #[arg(long, env = "SOURCE_AUTH_FILE")]
    source_auth_file: Option<PathBuf>,
    /// file: a disk file or a directory holding `disk.img`.
    #[arg(long, env = "SOURCE_PATH")]
    source_path: Option<PathBuf>,
    #[command(flatten)]
    destination: DestinationArgs,
}

#[derive(Args)]
struct DestinationArgs {
    /// Where the image goes.
    #[arg(long, env = "DESTINATION")]
    destination: DestinationKind,
    /// registry: the image to push (`host[:port]/path:tag`).
    #[arg(long, env = "DESTINATION_IMAGE")]
    destination_image: Option<String>,
    /// registry: a `.dockerconfigjson` file with the registry's credentials.
    #[arg(long, env = "DESTINATION_AUTH_FILE")]
    destination_auth_file: Option<PathBuf>,
    /// registry: a PEM bundle trusted beside the OS roots.
    #[arg(long, env = "DESTINATION_CA_FILE")]
    destination_ca_file: Option<PathBuf>,
    /// dir: the directory that gets `disk.img`.
    #[arg(long, env = "DESTINATION_DIR")]
    destination_dir: Option<PathBuf>,
    /// dir: the disk's size in bytes; a larger image is refused.
    #[arg(long, env = "DESTINATION_MAX_SIZE")]
    destination_max_size: Option<u64>,
    /// Downloads and conversions go here (default: the temp directory).
    #[arg(long, env = "SCRATCH_DIR")]
    scratch_dir: Option<PathBuf>,
    /// The qemu-img binary.
    #[arg(long, env = "QEMU_IMG")]
    qemu_img: Option<PathBuf>,
}

#[derive(Args)]
struct UploadArgs {
    /// The HTTPS listener.
    #[arg(long, env = "UPLOAD_LISTEN_ADDRESS", default_value = "0.0.0.0:8443")]
    upload_listen_address: std::net::SocketAddr,
    /// The serving certificate chain (PEM).
    #[arg(long, env = "UPLOAD_CERT_FILE")]
    upload_cert_file: PathBuf,
    /// Its private key (PEM).
    #[arg(long, env = "UPLOAD_KEY_FILE")]
    upload_key_file: PathBuf,
    /// The largest body accepted, in bytes (413 beyond).
    #[arg(long, env = "UPLOAD_MAX_SIZE")]
    upload_max_size: Option<u64>,
    #[command(flatten)]
    destination: DestinationArgs,
}

fn need<T>(v: Option<T>, name: &str, kind: &str) -> anyhow::Result<T> {
    v.with_context(|| format!("{name} is required for {kind}"))
}

impl DestinationArgs {
    fn destination(&self) -> anyhow::Result<Destination> {
        Ok(match self.destination {
            DestinationKind::Registry => {
                let image = need(
                    self.destination_image.as_deref(),
                    "DESTINATION_IMAGE",
                    "DESTINATION=registry",
                )?;
                Destination::Registry {
                    image: image.parse::<ImageReference>()?,
                    auth_file: self.destination_auth_file.clone(),
                    ca_file: self.destination_ca_file.clone(),
                }
            }
            DestinationKind::Dir => Destination::Dir {
                dir: need(self.destination_dir.clone(), "DESTINATION_DIR", "DESTINATION=dir")?,
                max_size: self.destination_max_size,
            },
        })
    }
}

impl ImportArgs {
    fn import(&self) -> anyhow::Result<Import> {
        let source = match self.source {
            SourceKind::Http => {
                let url = need(self.source_url.clone(), "SOURCE_URL", "SOURCE=http")?;
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    bail!("SOURCE_URL {url:?} is not an http or https URL");
                }
                Source::Http {
                    url,
                    sha256: self.source_sha256.clone().filter(|s| !s.is_empty()),
                    md5: self.source_md5.clone().filter(|s| !s.is_empty()),
                    ca_file: self.source_ca_file.clone(),
                }
            }
            SourceKind::Registry => {
                let image = need(self.source_image.as_deref(), "SOURCE_IMAGE", "SOURCE=registry")?;
                Source::Registry {
                    image: image.parse()?,
                    auth_file: self.source_auth_file.clone(),
                    ca_file: self.source_ca_file.clone(),
                }
            }
            SourceKind::File => Source::File {
                path: need(self.source_path.clone(), "SOURCE_PATH", "SOURCE=file")?,
            },
        };
        Ok(Import {
            source,
            destination: self.destination.destination()?,
            scratch_dir: self.destination.scratch_dir.clone(),
            qemu_img: self.destination.qemu_img.clone(),
        })
    }
}

fn write_message(path: &Path, m: &TerminationMessage) {
    let line = m.to_line();
    println!("{line}");
    if let Err(e) = std::fs::write(path, format!("{line}\n")) {
        tracing::warn!(file = %path.display(), error = %e, "cannot write the termination message");
    }
}

async fn run(cli: &Cli) -> anyhow::Result<TerminationMessage> {
    match &cli.command {
        Command::Import(a) => Ok(virtualization_dvcr::import(&a.import()?).await?),
        Command::Upload(a) => {
            let opts = upload::Upload {
                listen: a.upload_listen_address,
                cert_file: a.upload_cert_file.clone(),
                key_file: a.upload_key_file.clone(),
                max_size: a.upload_max_size,
                destination: a.destination.destination()?,
                scratch_dir: a.destination.scratch_dir.clone(),
                qemu_img: a.destination.qemu_img.clone(),
            };
            Ok(upload::serve(opts, shutdown_signal()).await?)
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            // Settings that cannot be parsed are a failure like any other: one line in the
            // termination message.
            let _ = e.print();
            let path = std::env::var_os("TERMINATION_MESSAGE_PATH")
                .map_or_else(|| PathBuf::from("/dev/termination-log"), PathBuf::from);
            let text = e.render().to_string();
            let line = text
                .lines()
                .map(str::trim)
                .filter(|l| {
                    !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information")
                })
                .collect::<Vec<_>>()
                .join(" ");
            let line = line.strip_prefix("error: ").unwrap_or(&line).to_owned();
            write_message(&path, &TerminationMessage::failure(line));
            return ExitCode::FAILURE;
        }
    };
    tracing_subscriber::fmt()
        .json()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            write_message(
                &cli.termination_message_path,
                &TerminationMessage::failure(format!("cannot start the runtime: {e}")),
            );
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(&cli)) {
        Ok(m) => {
            write_message(&cli.termination_message_path, &m);
            ExitCode::SUCCESS
        }
        Err(e) => {
            let msg = format!("{e:#}");
            tracing::error!(error = %msg, "failed");
            write_message(&cli.termination_message_path, &TerminationMessage::failure(msg));
            ExitCode::FAILURE
        }
    }
}
