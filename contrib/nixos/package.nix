# The sandkeeper command from this checkout, for contrib/nixos/module.nix
# (its default `package`) or on its own:
#
#   nix-build -E 'with import <nixpkgs> { }; callPackage ./contrib/nixos/package.nix { }'
#
# Needs a nixpkgs whose Rust is at least the workspace's rust-version
# (1.88). The test suite is not run here: it needs root, PID namespaces,
# mounts and systemd-tmpfiles, none of which a Nix build sandbox has.
{ lib, rustPlatform }:

let
  workspace = lib.importTOML ../../Cargo.toml;
in
rustPlatform.buildRustPackage {
  pname = "sandkeeper";
  inherit (workspace.workspace.package) version;

  # The checkout without build output, VCS data or Nix results.
  src = lib.cleanSourceWith {
    src = ../..;
    filter = path: type:
      let name = baseNameOf path; in
      !(builtins.elem name [ "target" ".git" "result" ]) && !(lib.hasPrefix "result-" name);
  };

  cargoLock.lockFile = ../../Cargo.lock;
  cargoBuildFlags = [ "-p" "sandkeeper-cli" ];
  doCheck = false;

  # The man pages and completions, as the Debian package has them.
  postInstall = ''
    mkdir -p $out/share/man/man1 $out/share/man/man5
    $out/bin/sandkeeper man --out-dir $out/share/man/man1
    mv $out/share/man/man1/sandkeeper.toml.5 $out/share/man/man5/
    mkdir -p $out/share/bash-completion/completions $out/share/zsh/site-functions $out/share/fish/vendor_completions.d
    $out/bin/sandkeeper completions bash > $out/share/bash-completion/completions/sandkeeper
    $out/bin/sandkeeper completions zsh > $out/share/zsh/site-functions/_sandkeeper
    $out/bin/sandkeeper completions fish > $out/share/fish/vendor_completions.d/sandkeeper.fish
  '';

  meta = {
    description = "Reap leaked scratch directories safely: leased sandboxes, process-aware in-use checks";
    license = with lib.licenses; [ mit asl20 ];
    platforms = lib.platforms.linux;
    mainProgram = "sandkeeper";
  };
}
