import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A loopback HTTP/1.1 server on plain sockets that answers every request `200 ok` on a kept-alive
/// connection, except the requests `resets` names by (connection, request on it), both from 1:
/// it reads those whole, then closes the connection with a reset (`SO_LINGER` 0), as a
/// backend that stopped between two requests of a kept-alive connection looks to its client.
final class ResettingServer: @unchecked Sendable {
    let port: Int
    private let listener: Int32
    private let resets: Set<[Int]>
    private let lock = NSLock()
    private var seen: [String] = []
    private var stopped = false

    /// What came, in order: "connection: METHOD path".
    var requests: [String] { lock.withLock { seen } }

    init(resets: Set<[Int]>) throws {
        self.resets = resets
        // A bound loopback socket (as the refused-connection test uses), made to listen.
        let (boundPort, fd) = try TransportSuiteTests.refusingPort()
        guard listen(fd, 16) == 0 else {
            close(fd)
            throw TransportTestFailure("listen() failed")
        }
        listener = fd
        port = boundPort
        let thread = Thread { [self] in serve() }
        thread.start()
    }

    /// Stops accepting; a connection being served ends at its next read.
    func stop() {
        // Closed once, and never accepted on after: the number may soon be another socket's.
        guard lock.withLock({ () -> Bool in
            defer { stopped = true }
            return !stopped
        }) else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func serve() {
        var connection = 0
        while !lock.withLock({ stopped }) {
            let client = accept(listener, nil, nil)
            guard client >= 0 else { return }
            if lock.withLock({ stopped }) {
                close(client)
                return
            }
            connection += 1
            #if !os(Linux)
                var noSignal: Int32 = 1
                setsockopt(client, SOL_SOCKET, SO_NOSIGPIPE, &noSignal, socklen_t(MemoryLayout<Int32>.size))
            #endif
            var timeout = timeval(tv_sec: 10, tv_usec: 0)
            setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let number = connection
            Thread { [self] in answer(client, connection: number) }.start()
        }
    }

    private func answer(_ client: Int32, connection: Int) {
        var buffer: [UInt8] = []
        var request = 0
        var chunk = [UInt8](repeating: 0, count: 4096)
        // Reads more into `buffer`; false when the client closed (the connection is then closed).
        func receive() -> Bool {
            let count = recv(client, &chunk, chunk.count, 0)
            guard count > 0 else {
                close(client)
                return false
            }
            buffer.append(contentsOf: chunk[0..<count])
            return true
        }
        while true {
            // One request: its head, then as many body bytes as Content-Length says.
            var headEnd = Self.headEnd(buffer)
            while headEnd == nil {
                guard receive() else { return }
                headEnd = Self.headEnd(buffer)
            }
            guard let end = headEnd else { return }
            let head = String(decoding: buffer[0..<end], as: UTF8.self)
            let lines = head.split(separator: "\r\n")
            let bodyLength = lines.dropFirst().compactMap { line -> Int? in
                let parts = line.split(separator: ":", maxSplits: 1)
                guard parts.count == 2, parts[0].lowercased() == "content-length" else { return nil }
                return Int(parts[1].trimmingCharacters(in: .whitespaces))
            }.first ?? 0
            while buffer.count < end + 4 + bodyLength {
                guard receive() else { return }
            }
            buffer.removeFirst(end + 4 + bodyLength)
            request += 1
            let line = lines.first.map { $0.split(separator: " ").prefix(2).joined(separator: " ") } ?? "?"
            lock.withLock { seen.append("\(connection): \(line)") }
            if resets.contains([connection, request]) {
                var option = linger(l_onoff: 1, l_linger: 0)
                setsockopt(client, SOL_SOCKET, SO_LINGER, &option, socklen_t(MemoryLayout<linger>.size))
                close(client)
                return
            }
            let answer = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"
            #if os(Linux)
                let flags = Int32(MSG_NOSIGNAL)
            #else
                let flags: Int32 = 0
            #endif
            _ = Array(answer.utf8).withUnsafeBytes { send(client, $0.baseAddress, $0.count, flags) }
        }
    }

    private static func headEnd(_ bytes: [UInt8]) -> Int? {
        guard bytes.count >= 4 else { return nil }
        for index in 0...(bytes.count - 4)
        where bytes[index] == 13 && bytes[index + 1] == 10 && bytes[index + 2] == 13 && bytes[index + 3] == 10 {
            return index
        }
        return nil
    }
}
