import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A TCP load balancer in front of the gateway instances: each accepted connection goes to
/// an instance picked at random (the next one when it refuses), bytes copied both ways by two
/// threads until either side closes. A killed instance's connections close; a paused one's
/// hang, as behind a real balancer.
final class Relay: @unchecked Sendable {
    let host: String
    private(set) var port: Int = 0
    private let targets: [(host: String, port: Int)]
    private let listener: Int32
    private let lock = NSLock()
    private var random: SeededRandom
    private var stopped = false
    /// Connections relayed, per target.
    private var counts: [Int]

    init(host: String, targets: [(host: String, port: Int)], seed: UInt64) throws {
        self.host = host
        self.targets = targets
        self.random = SeededRandom(seed: seed ^ 0x5eed)
        self.counts = Array(repeating: 0, count: targets.count)
        listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard listener >= 0 else { throw JepsenFailure("relay: socket failed (errno \(errno))") }
        var yes: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = Self.address(host, 0)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(listener, 256) == 0 else {
            throw JepsenFailure("relay: cannot listen on \(host) (errno \(errno))")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    static func address(_ host: String, _ port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr(host)
        return address
    }

    /// Connections relayed so far, per target.
    func connections() -> [Int] { lock.withLock { counts } }

    /// The port of target `index`.
    func targetPort(_ index: Int) -> Int { targets[index].port }

    func stop() {
        lock.withLock { stopped = true }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if lock.withLock({ stopped }) { return }
                if errno == EINTR || errno == ECONNABORTED { continue }
                return
            }
            let thread = Thread { [self] in connect(client) }
            thread.start()
        }
    }

    /// Connects `client` to an instance: a random first choice, then the others in turn.
    private func connect(_ client: Int32) {
        let first = lock.withLock { Int.random(in: 0..<targets.count, using: &random) }
        for step in 0..<targets.count {
            let index = (first + step) % targets.count
            let target = targets[index]
            let upstream = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard upstream >= 0 else { break }
            var address = Self.address(target.host, target.port)
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    Glibc.connect(upstream, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            if connected != 0 {
                close(upstream)
                continue
            }
            lock.withLock { counts[index] += 1 }
            let done = DispatchGroup()
            for (from, to) in [(client, upstream), (upstream, client)] {
                done.enter()
                let thread = Thread {
                    Self.pump(from: from, to: to)
                    done.leave()
                }
                thread.start()
            }
            done.wait()
            close(upstream)
            close(client)
            return
        }
        close(client)
    }

    /// Copies until `from` ends or fails, then shuts both down (the other pump ends too).
    private static func pump(from: Int32, to: Int32) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        outer: while true {
            let count = buffer.withUnsafeMutableBytes { read(from, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            var sent = 0
            while sent < count {
                let wrote = buffer.withUnsafeBytes { raw in write(to, raw.baseAddress.map { $0 + sent }, count - sent) }
                if wrote < 0 && errno == EINTR { continue }
                if wrote <= 0 { break outer }
                sent += wrote
            }
        }
        shutdown(from, Int32(SHUT_RDWR))
        shutdown(to, Int32(SHUT_RDWR))
    }
}
