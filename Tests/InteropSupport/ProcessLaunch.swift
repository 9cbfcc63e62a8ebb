public import Foundation

/// Starts child processes one at a time. swift-corelibs-foundation's `Process.run()` is not
/// safe to call from two threads at once (it crashed in a `memcpy` inside `run()` when a
/// code-generation test and a CLI test launched together), so every test launches through here.
public enum ProcessLaunch {
    // The lock serializes only the launch; the processes then run side by side.
    private static let lock = NSLock()

    /// Launches `process`. While this process has more open files than `Process.run()` can
    /// list safely (swiftlang/swift-corelibs-foundation#5472: over about 1,300, its read of
    /// `/proc/self/fd` runs past glibc's buffer and crashes), it waits for them to close, up to
    /// a minute, before launching.
    public static func run(_ process: Process) throws {
        lock.lock()
        defer { lock.unlock() }
        for _ in 0..<300 {
            guard let open = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd"), open.count > 1_000
            else { break }
            Thread.sleep(forTimeInterval: 0.2)
        }
        try process.run()
    }

    /// A tool built beside the test bundle (`oodata`), or nil when it was not built.
    public static func builtTool(_ name: String) -> URL? {
        var url = Bundle.main.bundleURL
        for _ in 0..<3 {
            let candidate = url.appendingPathComponent(name)
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
            url.deleteLastPathComponent()
        }
        return nil
    }
}
