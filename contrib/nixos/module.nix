# services.sandkeeper: sandkeeper on NixOS, as contrib/systemd has it.
#
# The units are those of contrib/systemd, directive for directive (the same
# ExecStart arguments, hardening, SIGHUP reload; paths are the Nix store's):
# mode = "daemon" gives sandkeeper.service (`sandkeeper watch`), mode =
# "timer" gives sandkeeper-reap.service and sandkeeper-reap.timer. The config
# is /etc/sandkeeper/config.toml, made from the options below with
# pkgs.formats.toml and checked at build time with
# `sandkeeper watch --check --config` (checkConfig). A changed config
# reloads the daemon (SIGHUP) instead of restarting it.
#
#   imports = [ /path/to/sandkeeper/contrib/nixos/module.nix ];
#   services.sandkeeper.enable = true;
#
# The option reference and a full example: docs/integrations.md.
{ config, lib, pkgs, ... }:

let
  inherit (lib) mkOption types;

  cfg = config.services.sandkeeper;

  settingsFormat = pkgs.formats.toml { };

  # Nulls are "not set": sandkeeper's own default applies (docs/config.md).
  dropNulls = attrs: lib.filterAttrs (_: v: v != null) attrs;

  duration = types.str;
  level = types.str;

  ruleOptions = {
    match = mkOption {
      type = types.str;
      example = "app-*";
      description = "A glob on the entry's name: `*`, `?`, `[...]`, `{a,b}`.";
    };
    older_than = mkOption {
      type = types.nullOr duration;
      default = null;
      example = "2h";
      description = "Only entries whose newest change inside is older than this. Relaxed under pressure.";
    };
    keep_last = mkOption {
      type = types.nullOr types.ints.unsigned;
      default = null;
      example = 3;
      description = "Keep the N newest entries of each name family. Relaxed under pressure.";
    };
    owner = mkOption {
      type = types.nullOr (types.either types.str types.ints.unsigned);
      default = null;
      example = "ci";
      description = ''
        Only entries owned by this user: a name or a uid. With checkConfig,
        a name is looked up in the build sandbox's password database, which
        knows only root, nixbld and nobody: give a uid there.
      '';
    };
  };

  rootOptions = {
    path = mkOption {
      type = types.strMatching "/.+";
      example = "/tmp";
      description = "The directory whose top-level entries are reaped. Absolute, not `/`.";
    };
    grace = mkOption {
      type = types.nullOr duration;
      default = null;
      example = "60s";
      description = "Nothing younger than this is ever removed, under pressure too (sandkeeper's default: 60s).";
    };
    orphan_age = mkOption {
      type = types.nullOr duration;
      default = null;
      example = "1h";
      description = "Orphaned sandboxes go once older than this; under pressure, once past the grace.";
    };
    max_keep = mkOption {
      type = types.nullOr duration;
      default = null;
      example = "7d";
      description = "A sandbox kept on purpose is honoured for at most this long (sandkeeper's default: 7d).";
    };
    user_dirs = mkOption {
      type = types.nullOr types.bool;
      default = null;
      example = true;
      description = "Also reap the per-user sandbox directories `sandkeeper-<uid>` in the root (sandkeeper's default: true).";
    };
    user_dir_families = mkOption {
      type = types.nullOr types.bool;
      default = null;
      description = "Label the name families of the per-user directories in the metrics.";
    };
    track_origins = mkOption {
      type = types.nullOr types.bool;
      default = null;
      description = "Record the creator of each new top-level entry (fanotify; see docs/origins.md).";
    };
    high_watermark = mkOption {
      type = types.nullOr level;
      default = null;
      example = "90%";
      description = ''Above this level a reap under pressure starts: "90%" used or "2GiB free". Needs low_watermark.'';
    };
    low_watermark = mkOption {
      type = types.nullOr level;
      default = null;
      example = "75%";
      description = "A reap under pressure goes on until the filesystem is at or below this level.";
    };
    high_watermark_inodes = mkOption {
      type = types.nullOr level;
      default = null;
      example = "95%";
      description = ''The same by inodes: "95%" of the inodes used, or "5000 free". Needs low_watermark_inodes.'';
    };
    low_watermark_inodes = mkOption {
      type = types.nullOr level;
      default = null;
      example = "80%";
      description = "A reap under pressure by inodes goes on until this level is reached.";
    };
    rules = mkOption {
      type = types.listOf (types.submodule { options = ruleOptions; });
      default = [ ];
      description = "Unmanaged families this root may reap (`[[root.rule]]`); the first rule matching a name decides.";
    };
  };

  renderRule = rule: dropNulls { inherit (rule) match older_than keep_last owner; };

  renderRoot = root:
    dropNulls {
      inherit (root) path grace orphan_age max_keep user_dirs user_dir_families
        track_origins high_watermark low_watermark high_watermark_inodes
        low_watermark_inodes;
    }
    // lib.optionalAttrs (root.rules != [ ]) { rule = map renderRule root.rules; };

  # The TOML document, as an attribute set: the typed options, then
  # `settings` over them (a key there replaces the typed one).
  rendered = { inherit (cfg) interval poll; }
    // lib.optionalAttrs (cfg.roots != [ ]) { root = map renderRoot cfg.roots; }
    // cfg.settings;

  uncheckedConfig = settingsFormat.generate "sandkeeper-config.toml" rendered;

  checkedConfig = pkgs.runCommand "sandkeeper-config-checked.toml"
    {
      nativeBuildInputs = [ cfg.package ];
      preferLocalBuild = true;
    }
    ''
      sandkeeper watch --check --config ${uncheckedConfig}
      cp ${uncheckedConfig} $out
    '';

  configFile = if cfg.checkConfig then checkedConfig else uncheckedConfig;

  # Where the units read it: the path contrib/systemd's units name, so that
  # a reload (SIGHUP) rereads the new file after a switch.
  configPath = "/etc/sandkeeper/config.toml";

  exe = "${cfg.package}/bin/sandkeeper";

  rootPaths = map (root: root.path) (rendered.root or [ ]);
  basePaths = [ "/tmp" "/var/tmp" ];
  # Roots outside /tmp and /var/tmp (contrib/systemd asks for a drop-in):
  # writable, and "-" so that a root missing at start does not stop the
  # unit (sandkeeper logs it every cycle).
  extraRoots = lib.filter (p: !(lib.elem p basePaths)) rootPaths;
  mounts = lib.concatStringsSep " " (basePaths ++ extraRoots);
  readWritePaths = [ (lib.concatStringsSep " " basePaths) ]
    ++ map (p: "-${p}") extraRoots;

  # What both services share, as contrib/systemd has it.
  unitConfig = {
    RequiresMountsFor = mounts;
  };
  hardening = {
    KillSignal = "SIGTERM";
    User = "root";
    CapabilityBoundingSet = "CAP_CHOWN CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_FOWNER CAP_SYS_PTRACE CAP_SYS_ADMIN CAP_SYS_CHROOT";
    NoNewPrivileges = "yes";
    UMask = "0022";
    ProtectSystem = "strict";
    ProtectHome = "read-only";
    PrivateTmp = "no";
    PrivateDevices = "no";
    DevicePolicy = "closed";
    DeviceAllow = "block-loop r";
    RestrictAddressFamilies = "AF_UNIX AF_NETLINK";
    IPAddressDeny = "any";
    ProtectKernelTunables = "yes";
    ProtectKernelModules = "yes";
    ProtectKernelLogs = "yes";
    ProtectControlGroups = "yes";
    ProtectClock = "yes";
    ProtectHostname = "yes";
    RestrictNamespaces = "mnt net";
    RestrictRealtime = "yes";
    RestrictSUIDSGID = "yes";
    LockPersonality = "yes";
    MemoryDenyWriteExecute = "yes";
    RemoveIPC = "yes";
    SystemCallArchitectures = "native";
    SystemCallFilter = "@system-service";
    SystemCallErrorNumber = "EPERM";
    Nice = "10";
    IOSchedulingClass = "best-effort";
    IOSchedulingPriority = "7";
    MemoryMax = "512M";
  };

  timerDescription =
    if cfg.timerInterval == "15min" then "every 15 minutes" else "every ${cfg.timerInterval}";

  noSpace = s: builtins.match ".*[[:space:]].*" s == null;
in
{
  options.services.sandkeeper = {
    enable = lib.mkEnableOption "sandkeeper, which reaps leaked scratch directories (leased sandboxes, process-aware)";

    package = mkOption {
      type = types.package;
      default = pkgs.callPackage ./package.nix { };
      defaultText = lib.literalExpression "pkgs.callPackage ./package.nix { }";
      description = "The sandkeeper package (its bin/sandkeeper).";
    };

    mode = mkOption {
      type = types.enum [ "daemon" "timer" ];
      default = "daemon";
      description = ''
        "daemon": sandkeeper.service runs `sandkeeper watch` (full cycles
        every `interval`, watermark polls every `poll`, metrics, reload on
        SIGHUP). "timer": sandkeeper-reap.timer runs
        `sandkeeper reap --config` every `timerInterval`, one cycle as
        `watch` would reap it.
      '';
    };

    interval = mkOption {
      type = duration;
      default = "5m";
      description = "Time between two full cycles of `watch` (the config's `interval`).";
    };

    poll = mkOption {
      type = duration;
      default = "5s";
      description = "Time between two watermark polls of `watch` (the config's `poll`).";
    };

    timerInterval = mkOption {
      type = types.str;
      default = "15min";
      example = "1h";
      description = "With mode = \"timer\": the timer's OnUnitActiveSec (a systemd time span).";
    };

    metricsFile = mkOption {
      type = types.nullOr (types.strMatching "/.+");
      default = "/var/lib/prometheus/node-exporter/sandkeeper.prom";
      example = "/var/lib/prometheus-node-exporter-text-files/sandkeeper.prom";
      description = ''
        With mode = "daemon": where `watch` writes its Prometheus metrics
        (node_exporter's textfile collector directory; null for none). Its
        directory is made writable for the service when it exists.
      '';
    };

    roots = mkOption {
      type = types.listOf (types.submodule { options = rootOptions; });
      description = "The roots (`[[root]]` of docs/config.md); keys left null take sandkeeper's defaults.";
      default = [
        {
          path = "/tmp";
          grace = "60s";
          orphan_age = "1h";
          user_dirs = true;
          high_watermark = "90%";
          low_watermark = "75%";
          high_watermark_inodes = "95%";
          low_watermark_inodes = "80%";
          rules = [
            { match = "app-*"; older_than = "2h"; keep_last = 3; }
            { match = "rust_out.*"; older_than = "1d"; }
          ];
        }
      ];
      defaultText = lib.literalExpression ''
        [ # contrib/systemd/config.toml
          { path = "/tmp"; grace = "60s"; orphan_age = "1h"; user_dirs = true;
            high_watermark = "90%"; low_watermark = "75%";
            high_watermark_inodes = "95%"; low_watermark_inodes = "80%";
            rules = [ { match = "app-*"; older_than = "2h"; keep_last = 3; }
                      { match = "rust_out.*"; older_than = "1d"; } ]; } ]
      '';
    };

    settings = mkOption {
      type = settingsFormat.type;
      default = { };
      example = { ignore_pids = [ 1 ]; assume_unseen_free = false; };
      description = ''
        Further top-level keys of the config file (docs/config.md:
        assume_unseen_free, trust_pid_namespace, ignore_pids, origin_store),
        written as they are. A key here replaces the typed option of the
        same name (`root` replaces `roots`).
      '';
    };

    checkConfig = mkOption {
      type = types.bool;
      default = true;
      description = ''
        Check the generated file with `sandkeeper watch --check --config`
        when the system is built (a bad file fails the build, naming its
        line). The check runs in the build sandbox: a rule's `owner` given
        by name must exist there (give a uid instead), or set this to false.
      '';
    };
  };

  config = lib.mkIf cfg.enable (lib.mkMerge [
    {
      assertions = [
        {
          assertion = rendered ? root && rendered.root != [ ];
          message = "services.sandkeeper: no root; set services.sandkeeper.roots (or settings.root).";
        }
        {
          assertion = lib.all (p: p != "/" && noSpace p) rootPaths;
          message = "services.sandkeeper: a root is / or has white space in its path: ${toString rootPaths}.";
        }
        {
          assertion = cfg.metricsFile == null || noSpace cfg.metricsFile;
          message = "services.sandkeeper.metricsFile has white space: ${toString cfg.metricsFile}.";
        }
      ];

      environment.systemPackages = [ cfg.package ];
      environment.etc."sandkeeper/config.toml".source = configFile;
    }

    (lib.mkIf (cfg.mode == "daemon") {
      systemd.services.sandkeeper = {
        description = "sandkeeper watch: reap leaked scratch directories before temp filesystems fill";
        documentation = [ "man:sandkeeper-watch(1)" "man:sandkeeper.toml(5)" ];
        after = [ "local-fs.target" ];
        wantedBy = [ "multi-user.target" ];
        # A new config is read on SIGHUP (a bad one keeps the old one and
        # logs why): a switch reloads, it does not restart.
        reloadTriggers = [ configFile ];
        inherit unitConfig;
        serviceConfig = hardening // {
          Type = "exec";
          ExecStartPre = "${exe} watch --check --config ${configPath}";
          ExecStart = "${exe} watch --config ${configPath}"
            + lib.optionalString (cfg.metricsFile != null) " --metrics-file ${cfg.metricsFile}";
          ExecReload = "${pkgs.coreutils}/bin/kill -HUP $MAINPID";
          TimeoutStopSec = "90s";
          Restart = "on-failure";
          RestartSec = "10s";
          ReadWritePaths = readWritePaths
            ++ lib.optional (cfg.metricsFile != null) "-${dirOf cfg.metricsFile}";
        };
      };
    })

    (lib.mkIf (cfg.mode == "timer") {
      systemd.services.sandkeeper-reap = {
        description = "sandkeeper reap: remove leaked scratch directories (one shot)";
        documentation = [ "man:sandkeeper-reap(1)" "man:sandkeeper.toml(5)" ];
        after = [ "local-fs.target" ];
        inherit unitConfig;
        serviceConfig = hardening // {
          Type = "oneshot";
          ExecStart = "${exe} reap --config ${configPath}";
          ReadWritePaths = readWritePaths;
        };
      };
      systemd.timers.sandkeeper-reap = {
        description = "Reap leaked scratch directories ${timerDescription}";
        wantedBy = [ "timers.target" ];
        timerConfig = {
          OnBootSec = "5min";
          OnUnitActiveSec = cfg.timerInterval;
          RandomizedDelaySec = "1min";
          AccuracySec = "1min";
          Unit = "sandkeeper-reap.service";
        };
      };
    })
  ]);
}
