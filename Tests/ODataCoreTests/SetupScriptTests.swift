import Foundation
import InteropSupport
import Testing

/// `scripts/setup`, behind the README's `make demo` and `make test`, without changing the
/// machine: each case runs it with a `PATH` of its own, made of links to this machine's
/// programs with some left out and some replaced by fakes (`uname`, `id`, `brew`, `apt-get`)
/// that only record how they were called.
@Suite struct SetupScriptTests {
    static let script = Interop.repository.appendingPathComponent("scripts/setup").path

    /// A folder of links to every program on this process's `PATH` but `hidden`, plus `fakes`
    /// (name → shell script body).
    final class FakePath {
        let folder: URL
        init(hiding hidden: Set<String>, fakes: [String: String] = [:]) throws {
            folder = FileManager.default.temporaryDirectory.appendingPathComponent("setup-path-\(UUID().uuidString)")
            let manager = FileManager.default
            try manager.createDirectory(at: folder, withIntermediateDirectories: true)
            let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
            var seen = Set<String>()
            for directory in path.split(separator: ":").map(String.init) {
                for name in (try? manager.contentsOfDirectory(atPath: directory)) ?? [] {
                    guard !hidden.contains(name), fakes[name] == nil, !seen.contains(name) else { continue }
                    let target = directory + "/" + name
                    guard manager.isExecutableFile(atPath: target) else { continue }
                    seen.insert(name)
                    try manager.createSymbolicLink(atPath: folder.appendingPathComponent(name).path,
                                                   withDestinationPath: target)
                }
            }
            for (name, body) in fakes {
                let file = folder.appendingPathComponent(name)
                try Data("#!/bin/sh\n\(body)\n".utf8).write(to: file)
                try manager.setAttributes([.posixPermissions: 0o755], ofItemAtPath: file.path)
            }
        }
        /// A file the fakes may write to.
        var record: URL { folder.appendingPathComponent("record.txt") }
        var recorded: String { (try? String(contentsOf: record, encoding: .utf8)) ?? "" }
        deinit { try? FileManager.default.removeItem(at: folder) }
    }

    /// Runs `scripts/setup arguments` with a clean environment: `PATH` is the fake one, stdin is
    /// not a terminal, and neither `CI` nor `YES` is set unless `environment` sets them.
    func setup(_ arguments: [String], path: FakePath, environment: [String: String] = [:])
        async throws -> (status: Int32, out: String, err: String)
    {
        var env = ["PATH=\(path.folder.path)", "HOME=\(NSTemporaryDirectory())"]
        env += environment.map { "\($0.key)=\($0.value)" }
        return try await Interop.runOffPool("/usr/bin/env", ["-i"] + env + ["/bin/bash", Self.script] + arguments)
    }

    static var isRoot: Bool { getuid() == 0 }

    #if os(Linux)
    /// The example: a `PATH` without `pkg-config` makes the dry run print the apt-get
    /// command that installs it (and nothing else: SQLCipher is found without pkg-config, as it
    /// must be on a machine that built these tests).
    @Test func aMissingPkgConfigGivesTheAptCommand() async throws {
        let path = try FakePath(hiding: ["pkg-config"], fakes: ["id": "echo 0"])
        let result = try await setup(["--dry-run", "demo"], path: path)
        #expect(result.status == 0, "\(result.err)")
        #expect(result.out.contains("  - pkg-config, which finds SQLCipher for the build\n"), "\(result.out)")
        #expect(!result.out.contains("SQLCipher's headers"), "\(result.out)")
        #expect(result.out.contains(
            "setup: would run: apt-get update && apt-get install -y --no-install-recommends pkg-config\n"), "\(result.out)")
    }

    /// Only what is missing, per goal: curl is a test requirement, not a demo one.
    @Test func theTestGoalAddsCurlAndTheDemoGoalDoesNot() async throws {
        let path = try FakePath(hiding: ["pkg-config", "curl"], fakes: ["id": "echo 0"])
        let test = try await setup(["--dry-run", "test"], path: path)
        #expect(test.out.contains("install -y --no-install-recommends pkg-config curl\n"), "\(test.out)")
        let demo = try await setup(["--dry-run", "demo"], path: path)
        #expect(demo.out.contains("install -y --no-install-recommends pkg-config\n"), "\(demo.out)")
        let nothing = try await setup(["--dry-run", "test"], path: try FakePath(hiding: [], fakes: ["id": "echo 0"]))
        #expect(nothing.status == 0)
        #expect(nothing.out == "setup: everything the test needs is installed.\n", "\(nothing.out)")
    }

    /// Not root: the same command through sudo; no sudo either: stop at once with the command
    /// a person must run as root.
    @Test func withoutRootItUsesSudoOrStops() async throws {
        let withSudo = try FakePath(hiding: ["pkg-config"], fakes: ["id": "echo 1000", "sudo": "exit 0"])
        let viaSudo = try await setup(["--dry-run", "demo"], path: withSudo)
        #expect(viaSudo.status == 0, "\(viaSudo.err)")
        #expect(viaSudo.out.contains(
            "would run: sudo apt-get update && sudo apt-get install -y --no-install-recommends pkg-config"), "\(viaSudo.out)")
        let noSudo = try FakePath(hiding: ["pkg-config", "sudo"], fakes: ["id": "echo 1000"])
        let stopped = try await setup(["--dry-run", "demo"], path: noSudo)
        #expect(stopped.status == 1)
        #expect(stopped.err.contains("neither root nor sudo"), "\(stopped.err)")
        #expect(stopped.err.contains("apt-get update && apt-get install -y pkg-config"), "\(stopped.err)")
    }

    /// Without a terminal and without CI or YES it installs nothing; with YES=1 it runs apt-get
    /// update and install of exactly the missing packages (a fake apt-get records the calls),
    /// then probes again and reports what is still missing.
    @Test func installsOnlyWhenAllowedAndChecksAfterwards() async throws {
        let path = try FakePath(hiding: ["pkg-config"], fakes: [
            "id": "echo 0",
            "apt-get": "echo \"apt-get $* [$DEBIAN_FRONTEND]\" >> \"$(dirname \"$0\")/record.txt\"",
        ])
        let refused = try await setup(["demo"], path: path)
        #expect(refused.status == 1)
        #expect(refused.err.contains("not on a terminal, so nothing was installed"), "\(refused.err)")
        #expect(refused.err.contains("YES=1"), "\(refused.err)")
        #expect(path.recorded.isEmpty)

        // Only 1, true or yes say yes.
        for no in [["YES": "0"], ["CI": "false"], ["YES": ""]] {
            let refusedAgain = try await setup(["demo"], path: path, environment: no)
            #expect(refusedAgain.status == 1 && path.recorded.isEmpty, "\(no): \(refusedAgain.err)")
        }
        let allowed = try await setup(["demo"], path: path, environment: ["YES": "1"])
        #expect(path.recorded == """
            apt-get update [noninteractive]
            apt-get install -y --no-install-recommends pkg-config [noninteractive]

            """, "\(path.recorded)")
        #expect(allowed.status == 1, "the fake installed nothing, so the second probe must fail")
        #expect(allowed.err.contains("still missing after the install: pkg-config"), "\(allowed.err)")

        try? FileManager.default.removeItem(at: path.record)
        let inCI = try await setup(["demo"], path: path, environment: ["CI": "true"])
        #expect(path.recorded.contains("apt-get install -y --no-install-recommends pkg-config"), "\(inCI.out)")
    }
    #endif

    /// macOS (a fake `uname`): Homebrew's formulas, and a stop naming Homebrew when it is absent.
    @Test func macOSGivesTheBrewCommand() async throws {
        let brew = "if [ \"$1\" = list ]; then exit 1; fi; echo \"brew $*\" >> \"$(dirname \"$0\")/record.txt\""
        let path = try FakePath(hiding: ["pkg-config"], fakes: ["uname": "echo Darwin", "brew": brew])
        let result = try await setup(["--dry-run", "test"], path: path)
        #expect(result.status == 0, "\(result.err)")
        #expect(result.out.contains("setup: would run: brew install pkgconf sqlcipher\n"), "\(result.out)")
        #expect(path.recorded.isEmpty, "a dry run installs nothing")

        // Only curl missing: macOS has it; nothing to brew.
        let onlyCurl = try FakePath(hiding: ["curl"], fakes: ["uname": "echo Darwin", "brew": brew])
        let nothing = try await setup(["--dry-run", "test"], path: onlyCurl)
        #expect(nothing.status == 0 && nothing.out.contains("nothing to install"), "\(nothing.out) \(nothing.err)")
        let noBrew = try FakePath(hiding: ["pkg-config", "brew"], fakes: ["uname": "echo Darwin"])
        let stopped = try await setup(["--dry-run", "demo"], path: noBrew)
        #expect(stopped.status == 1)
        #expect(stopped.err.contains("Homebrew is not installed (https://brew.sh)"), "\(stopped.err)")
        #expect(stopped.err.contains("brew install pkgconf sqlcipher"), "\(stopped.err)")
    }

    /// Another system: nothing is tried, the exit status is 1 and the message says what to install.
    @Test func anUnknownSystemStopsAtOnce() async throws {
        let path = try FakePath(hiding: ["pkg-config"], fakes: ["uname": "echo FreeBSD"])
        let result = try await setup(["--dry-run", "demo"], path: path)
        #expect(result.status == 1)
        #expect(result.err.contains("FreeBSD is not supported by this script, so nothing was installed"), "\(result.err)")
        #expect(result.err.contains("sqlcipher.pc"), "\(result.err)")
    }

    /// Without a toolchain there is nothing to build with: say where to get one.
    @Test func noSwiftStopsWithWhereToGetIt() async throws {
        let path = try FakePath(hiding: ["swift"])
        let result = try await setup(["--dry-run", "demo"], path: path)
        #expect(result.status == 1)
        #expect(result.err.contains("no Swift toolchain on PATH"), "\(result.err)")
        #expect(result.err.contains("https://www.swift.org/install/"), "\(result.err)")
    }
}
