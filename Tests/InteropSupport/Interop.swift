public import Foundation

/// Third-party OData software from PyPI for the interop tests: a virtual environment under
/// `.build/interop-venv` (made on first use; `.ci/run` makes it before the tests), commands
/// run to the end, and producers run as servers on loopback.
public enum Interop {
    /// The PyPI packages of the peers, pinned.
    /// Selenium drives Debian's Chromium for the admin page's test.
    public static let packages = [
        "pyodata==1.12.1", "requests", "pyslet==0.7.20170805", "python-odata==0.8.1", "selenium==4.*",
    ]
    /// What the venv must import.
    static let imports = "import pyodata, requests, pyslet.odata2.server, odata, selenium"

    /// The repository's root folder.
    public static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// A script of `Tests/Interop`.
    public static func script(_ name: String) -> String { repository.appendingPathComponent("Tests/Interop/" + name).path }

    /// A failure of the test harness itself.
    public struct Failure: Error, CustomStringConvertible {
        public var message: String
        public init(_ message: String) { self.message = message }
        public var description: String { message }
    }

    /// Runs a command to its end: exit status, standard output, standard error.
    /// Kills `process` with SIGKILL and waits at most 10 s for its end, reaping it here when
    /// Foundation has not: its `waitUntilExit` on Linux can miss a killed child's exit and
    /// wait for ever (seen once in CI, the child a zombie).
    public static func killAndReap(_ process: Process) {
        let pid = process.processIdentifier
        kill(pid, SIGKILL)
        let deadline = Date().addingTimeInterval(10)
        while process.isRunning, Date() < deadline {
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid { return }
            Thread.sleep(forTimeInterval: 0.02)
        }
    }

    public static func run(_ executable: String, _ arguments: [String]) throws -> (Int32, String, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try ProcessLaunch.run(process)
        // Standard error is read on another thread, so that neither pipe fills and blocks.
        let errors = ErrorReader(err.fileHandleForReading)
        let outData = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: outData, as: UTF8.self), errors.finish())
    }

    /// ``run(_:_:)`` on a dispatch queue, for async tests: a process waited for on the
    /// two-thread concurrency pool would starve in-process servers of other tests.
    public static func runOffPool(_ executable: String, _ arguments: [String]) async throws -> (Int32, String, String) {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                do { continuation.resume(returning: try run(executable, arguments)) } catch { continuation.resume(throwing: error) }
            }
        }
    }

    /// ``python()`` on a dispatch queue (installing the peers can take a while).
    public static func pythonOffPool() async throws -> String {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                do { continuation.resume(returning: try python()) } catch { continuation.resume(throwing: error) }
            }
        }
    }

    private static let installing = NSLock()

    /// The venv's python with every peer installed (installed now if missing).
    public static func python() throws -> String {
        installing.lock()
        defer { installing.unlock() }
        let venv = repository.appendingPathComponent(".build/interop-venv")
        let python = venv.appendingPathComponent("bin/python").path
        if FileManager.default.isExecutableFile(atPath: python), (try? run(python, ["-c", imports]).0) == 0 { return python }
        if !FileManager.default.isExecutableFile(atPath: python) {
            let (created, _, createError) = try run("/usr/bin/env", ["python3", "-m", "venv", venv.path])
            guard created == 0 else { throw Failure("cannot create a venv: \(createError)") }
        }
        let (installed, _, installError) = try run(venv.appendingPathComponent("bin/pip").path, ["install", "-q"] + packages)
        guard installed == 0 else { throw Failure("cannot install \(packages.joined(separator: " ")): \(installError)") }
        return python
    }

    /// A producer script running as a server until `stop()`.
    public final class Server: @unchecked Sendable {
        // `@unchecked Sendable`: `process` is only started in `init` and ended in `stop`.
        private let process: Process
        /// The service root the script printed (`READY <url>`).
        public let serviceRoot: URL

        /// Starts `script` with `arguments` and waits (up to 60 s) for its `READY <url>` line.
        public init(script: String, arguments: [String]) throws {
            let python = try Interop.python()
            process = Process()
            process.executableURL = URL(fileURLWithPath: python)
            process.arguments = [script] + arguments
            let out = Pipe()
            process.standardOutput = out
            process.standardError = FileHandle.standardError
            try ProcessLaunch.run(process)
            // The first line is read on a thread of its own, so that a child that prints
            // nothing cannot hold the tests past the deadline.
            let reader = LineReader(out.fileHandleForReading)
            guard let line = reader.firstLine(within: 60) else {
                kill(process.processIdentifier, SIGKILL)
                throw Failure("\(script) did not print READY within 60 s")
            }
            let text = String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            guard text.hasPrefix("READY "), let url = URL(string: String(text.dropFirst(6))) else {
                kill(process.processIdentifier, SIGKILL)
                throw Failure("\(script) printed \(text) instead of READY <url>")
            }
            serviceRoot = url
        }

        /// Starts a server (see ``init(script:arguments:)``) on a dispatch queue, for async
        /// tests: its wait for `READY` must not hold a thread of the concurrency pool.
        public static func start(script: String, arguments: [String]) async throws -> Server {
            try await withCheckedThrowingContinuation { continuation in
                DispatchQueue.global().async {
                    do {
                        continuation.resume(returning: try Server(script: script, arguments: arguments))
                    } catch {
                        continuation.resume(throwing: error)
                    }
                }
            }
        }

        /// Ends the server. With SIGKILL: a process started from a Swift concurrency thread
        /// inherits that thread's signal mask, in which SIGTERM is blocked.
        ///
        /// Waits at most 10 s: Foundation's `waitUntilExit` on Linux can miss the exit of a
        /// killed child and wait for ever (seen once in CI, the child a zombie). The child is
        /// reaped here if Foundation has not done it.
        public func stop() {
            guard process.isRunning else { return }
            Interop.killAndReap(process)
        }

        deinit { stop() }
    }
}

/// Reads a pipe's first line on a thread of its own.
private final class LineReader: @unchecked Sendable {
    // `@unchecked Sendable`: `line` is written by the reading thread before `done` is
    // signalled and read only after waiting for it.
    private let done = DispatchSemaphore(value: 0)
    private var line = Data()

    init(_ handle: FileHandle) {
        Thread.detachNewThread { [self] in
            while !line.contains(0x0A) {
                let chunk = handle.availableData
                if chunk.isEmpty { break }
                line.append(chunk)
            }
            done.signal()
        }
    }

    /// The first line, or nil when none came within `seconds`.
    func firstLine(within seconds: Double) -> Data? {
        done.wait(timeout: .now() + seconds) == .success ? line : nil
    }
}

/// Reads a pipe to its end on a thread of its own.
private final class ErrorReader: @unchecked Sendable {
    // `@unchecked Sendable`: `data` is written before `done` is signalled and read after it.
    private let done = DispatchSemaphore(value: 0)
    private var data = Data()

    init(_ handle: FileHandle) {
        Thread.detachNewThread { [self] in
            data = handle.readDataToEndOfFile()
            done.signal()
        }
    }

    func finish() -> String {
        done.wait()
        return String(decoding: data, as: UTF8.self)
    }
}
