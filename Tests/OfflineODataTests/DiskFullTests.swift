import Foundation
import InteropSupport
import ODataCore
import Testing
@testable import OfflineOData

/// Issue 34, item 13: a full disk. The store lives on a real 8 MiB tmpfs that a filler file
/// fills: writes fail with `diskFull` naming the store, and the store stays readable — an open,
/// reads, the RequestQueue and the ErrorArchive — until space is freed. Needs the right to
/// mount (root, as in CI); elsewhere the test does not run, and says so.
@Suite(.serialized) struct DiskFullTests {
    static let canMount: Bool = {
        guard getuid() == 0, let (status, _, _) = try? Interop.run("/usr/bin/env", ["mount", "--version"]) else { return false }
        return status == 0
    }()

    /// A small filesystem of its own, unmounted afterwards.
    final class SmallDisk {
        let folder: URL
        init() throws {
            folder = FileManager.default.temporaryDirectory.appendingPathComponent("oodata-full-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            let (status, _, err) = try Interop.run("/usr/bin/env", ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", folder.path])
            guard status == 0 else { throw Interop.Failure("cannot mount a tmpfs: \(err)") }
        }
        var filler: URL { folder.appendingPathComponent("filler") }
        /// Fills the disk but for `spare` bytes.
        func fill(leaving spare: Int = 8192) throws {
            let attributes = try FileManager.default.attributesOfFileSystem(forPath: folder.path)
            let free = (attributes[.systemFreeSize] as? NSNumber)?.intValue ?? 0
            guard FileManager.default.createFile(atPath: filler.path, contents: Data(count: max(0, free - spare))) else {
                throw Interop.Failure("cannot write the filler file")
            }
        }
        func free() { try? FileManager.default.removeItem(at: filler) }
        deinit {
            _ = try? Interop.run("/usr/bin/env", ["umount", folder.path])
            try? FileManager.default.removeItem(at: folder)
        }
    }

    @Test(.enabled(if: DiskFullTests.canMount, "mounting a tmpfs needs root"), arguments: [false, true])
    func aFullDiskRefusesWritesAndStillReads(v2: Bool) async throws {
        let fixture = try await Fixture.start()
        defer { Task { await fixture.stop() } }
        let disk = try SmallDisk()
        var parameters = fixture.parameters()
        parameters.storePath = disk.folder
        let provider = try await fixture.provider(v2: v2, parameters: parameters)
        try await provider.open()
        _ = try await provider.execute(method: "PATCH", url: "BusinessPartners('BP0')", body: Array(#"{"Phone":"before"}"#.utf8))
        try disk.fill()
        let big = String(repeating: "y", count: 60_000)
        var refusal: OfflineODataError?
        for attempt in 0..<300 {
            do {
                _ = try await provider.execute(
                    method: "PATCH", url: "BusinessPartners('BP1')", body: Array(#"{"Phone":"\#(big)\#(attempt)"}"#.utf8))
            } catch let error as OfflineODataError {
                refusal = error
                break
            }
        }
        let error = try #require(refusal, "the disk never filled")
        #expect(error.code == .diskFull, "\(error)")
        #expect(error.message.contains(parameters.storeFile), "\(error)")
        let queued = count(try await provider.read("RequestQueue"))
        // Reopened with the disk still full: the store opens and reads.
        await provider.close()
        let again = try await fixture.provider(v2: v2, parameters: parameters)
        try await again.open()
        #expect(count(try await again.read("BusinessPartners")) == 3)
        #expect(count(try await again.read("RequestQueue")) == queued)
        #expect(count(try await again.read("ErrorArchive")) == 0)
        #expect(try await again.readEntities("BusinessPartners('BP0')").first?.string("Phone") == "before")
        await #expect(throws: OfflineODataError.self) {
            _ = try await again.execute(method: "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Phone":"\#(big)"}"#.utf8))
        }
        // With space again, writes and the upload work.
        disk.free()
        _ = try await again.execute(method: "PATCH", url: "BusinessPartners('BP2')", body: Array(#"{"Phone":"after"}"#.utf8))
        try await again.upload()
        #expect(try await fixture.backend("BusinessPartners('BP2')")["Phone"]?.stringValue == "after")
        #expect(try await fixture.backend("BusinessPartners('BP0')")["Phone"]?.stringValue == "before")
        await again.close()
    }
}
