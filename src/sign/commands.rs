//! Commands shown to customers, to check a report with stock OpenSSH and coreutils.

use super::*;

/// Quote for a POSIX shell when needed.
pub(super) fn sh_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"@%+=:,./_-".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn join_display(dir: &str, file: &str) -> String {
    if dir.is_empty() || dir == "." {
        file.to_string()
    } else if dir.ends_with('/') {
        format!("{dir}{file}")
    } else {
        format!("{dir}/{file}")
    }
}

/// The stock-OpenSSH command that checks the first signature over the manifest
/// in `dir_display` for `identity`, given an `allowed_signers` file in the
/// current directory (see [`allowed_signers_line`]).
pub fn verify_command(dir_display: &str, identity: &str) -> String {
    verify_command_for(dir_display, identity, SIGNATURE_FILE)
}

/// Like [`verify_command`], for the signature file `signature` (a countersignature).
pub fn verify_command_for(dir_display: &str, identity: &str, signature: &str) -> String {
    format!(
        "ssh-keygen -Y verify -f allowed_signers -I {} -n {NAMESPACE} -s {} < {}",
        sh_quote(identity),
        sh_quote(&join_display(dir_display, signature)),
        sh_quote(&join_display(dir_display, MANIFEST_FILE)),
    )
}

/// The coreutils command that checks every file digest listed in the manifest.
pub fn digest_check_command(dir_display: &str) -> String {
    let dir = if dir_display.is_empty() {
        "."
    } else {
        dir_display
    };
    format!("cd {} && sha256sum -c {MANIFEST_FILE}", sh_quote(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_quoted() {
        assert_eq!(
            verify_command("out/run 1", "ops@example.com"),
            "ssh-keygen -Y verify -f allowed_signers -I ops@example.com -n nodecert -s 'out/run 1/nodecert-manifest.txt.sig' < 'out/run 1/nodecert-manifest.txt'"
        );
        assert_eq!(
            digest_check_command("r"),
            "cd r && sha256sum -c nodecert-manifest.txt"
        );
    }
}
