import Foundation

/// Limits how many backend fixtures (a server, its store, the offline stores of the test) are
/// alive at once. Swift Testing runs every test of the target at the same time; with a hundred
/// fixtures the test process had over 1,500 open files, and swift-corelibs-foundation's
/// `Process.run()` then over-reads the directory buffer of `/proc/self/fd` and crashes
/// (swiftlang/swift-corelibs-foundation#5472, in Swift 6.3.1) — three CI runs in a row did.
/// Below about 1,300 open files the buffer is never full and the over-read cannot happen.
actor FixtureGate {
    static let shared = FixtureGate(limit: 16)

    private var available: Int
    private var waiters: [(id: UUID, continuation: CheckedContinuation<Void, Never>)] = []

    init(limit: Int) { available = limit }

    /// Waits for a place. After 15 minutes a fixture goes ahead anyway: a test that holds two
    /// fixtures must never wait for itself for ever. (It was 60 s: on two cores, with the whole
    /// suite started at once, most waiters went ahead after a minute and CI saw 93 fixtures and
    /// over 1,500 open files again, and the crash.)
    func acquire() async {
        if available > 0 {
            available -= 1
            return
        }
        let id = UUID()
        await withCheckedContinuation { continuation in
            waiters.append((id, continuation))
            Task {
                try? await Task.sleep(for: .seconds(900))
                self.giveUp(id)
            }
        }
    }

    private func giveUp(_ id: UUID) {
        guard let index = waiters.firstIndex(where: { $0.id == id }) else { return }
        // It goes ahead without a place; its release gives one back all the same.
        available -= 1
        waiters.remove(at: index).continuation.resume()
    }

    func release() {
        if waiters.isEmpty {
            available += 1
        } else {
            waiters.removeFirst().continuation.resume()
        }
    }
}
