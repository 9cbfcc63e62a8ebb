import CRawSQLCipher
import Foundation
import ODataCore
import ODataServer
import ODataStore
import PayloadFixtures

// The backend of `Scale`, in a process and a binary of its own: the reference server with N
// products in the folder given. It prints its V4 root, then serves until its parent ends.
// A binary of its own keeps the server's code (Hummingbird, the service) out of the client's
// process, so that the client's peak memory holds what an app linking OfflineOData maps.
//
// Usage: ScaleBackend N pageSize folder

let arguments = CommandLine.arguments
guard arguments.count == 4, let count = Int(arguments[1]), let pageSize = Int(arguments[2]) else {
    FileHandle.standardError.write(Data("usage: ScaleBackend N pageSize folder\n".utf8))
    exit(2)
}
// Ends with the parent, however it ends (a parent cut short by a closed pipe left it running).
raw_end_with_parent()
let model = try MetadataParser().parse(ProductModel.metadata)
let folder = URL(fileURLWithPath: arguments[3])
let backendStore = try await Store.create(path: folder.appendingPathComponent("backend.sqlite").path, model: model)
var options = ODataService.Options()
options.pageSize = pageSize
options.deltaRetention = 10_000_000
let service = try await ODataService.open(store: backendStore, options: options)
// `SCATTERED_CATEGORIES=1`: CategoryID takes 10,000 values in a scattered order (a
// multiplicative hash of the key) instead of 100 in turn, so that each page's rows land all over
// the client's lookup index of the foreign key.
let scattered = ProcessInfo.processInfo.environment["SCATTERED_CATEGORIES"] != nil
func product(_ i: Int) -> Entity {
    var entity = ProductModel.product(i)
    if scattered { entity["CategoryID"] = .primitive(.int32(Int32((UInt64(i) &* 2_654_435_761) % 10_000))) }
    return entity
}
for start in stride(from: 0, to: count, by: 10_000) {
    try await service.load([("Products", (start..<min(start + 10_000, count)).map(product))])
}
let server = try await EmbeddedServer.start(service)
FileHandle.standardOutput.write(Data((server.v4Root.absoluteString + "\n").utf8))
while true { try await Task.sleep(nanoseconds: 1_000_000_000) }
