public import Foundation

// Progress of long operations: the steps (SPEC §8), the update values the delegate and the
// event stream receive, the texts of each step in 30 languages (`progress-messages.json`), and
// ``ProgressReporter``, which numbers the steps of one operation monotonically.

/// The steps long operations report (SPEC §8).
public enum OfflineODataProgressStep: String, Sendable, CaseIterable, Codable {
    case buildingEntityStore, creatingBootStrapDatabase, creatingRequestQueueDatabase, downloadingEntityStore,
        erasingExpiredRequests, loadingMetadata, performingRequestQueueMerge, performingTransactionMerge,
        performingCreateDeleteMerge, processingDefiningQueries, processingRequests, reapplyingChanges,
        analyzingReceivedData, receivingDataFromServer, removingDeletedRelationships, removingRemoveAfterUploadRequests,
        sendingDataToServer, sendingEntityStoreDatabase, sendingRequestQueueDatabase, uploadPreprocessing,
        waitingForDownload
}

/// Which operation a progress update belongs to.
public enum OfflineODataOperation: String, Sendable, Codable {
    case open, download, upload, sendStore
}

/// One progress update.
public struct OfflineODataProgress: Sendable {
    /// The operation reporting.
    public var operation: OfflineODataOperation
    /// The step it has reached.
    public var step: OfflineODataProgressStep
    /// 1-based number of the current step.
    public var stepNumber: Int
    /// How many steps the operation can pass through (may grow while it runs).
    public var totalSteps: Int
    /// When the update was made.
    public var time: Date
    /// Step parameters: `name`, `url`, `number`, `count`, `receivedBytes`, `sentBytes`, `totalBytes`.
    public var parameters: [String: String]
    /// The default message in the device language (English when it has no translation).
    public var message: String
}

extension OfflineODataProgress {
    /// The same update in the shape of SAP's `OfflineODataOperationProgress`.
    public var operationProgress: OfflineODataOperationProgress {
        OfflineODataOperationProgress(
            step: step, currentStepNumber: stepNumber, totalNumberOfSteps: totalSteps,
            parameters: OfflineODataOperationProgress.positional(step, parameters), defaultMessage: message,
            lastUpdated: time)
    }
}

/// A progress update as SAP's SDK delivers it (SPEC §8): what
/// ``OfflineODataDelegate/offlineODataProvider(_:didUpdateOpenProgress:)`` and its siblings get.
public struct OfflineODataOperationProgress: Sendable, Hashable {
    /// The step the operation has reached.
    public var step: OfflineODataProgressStep
    /// 1-based number of the current step; never decreases within an operation.
    public var currentStepNumber: Int
    /// How many steps the operation can pass through (may grow, never shrinks).
    public var totalNumberOfSteps: Int
    /// The step's parameters by position, as SAP's table numbers them: received and total
    /// bytes (downloadingEntityStore), request name and URL (processingDefiningQueries),
    /// request number and total (processingRequests), received bytes
    /// (receivingDataFromServer), sent bytes (sendingDataToServer); empty for other steps.
    public var parameters: [String]
    /// The default message in the device language.
    public var defaultMessage: String
    /// When the update was made.
    public var lastUpdated: Date

    /// Creates an update from its parts.
    public init(
        step: OfflineODataProgressStep, currentStepNumber: Int, totalNumberOfSteps: Int, parameters: [String],
        defaultMessage: String, lastUpdated: Date
    ) {
        self.step = step
        self.currentStepNumber = currentStepNumber
        self.totalNumberOfSteps = totalNumberOfSteps
        self.parameters = parameters
        self.defaultMessage = defaultMessage
        self.lastUpdated = lastUpdated
    }

    /// The names of each step's parameters, in SAP's order.
    static let parameterNames: [OfflineODataProgressStep: [String]] = [
        .downloadingEntityStore: ["receivedBytes", "totalBytes"], .processingDefiningQueries: ["name", "url"],
        .processingRequests: ["number", "count"], .receivingDataFromServer: ["receivedBytes"],
        .sendingDataToServer: ["sentBytes"],
    ]

    static func positional(_ step: OfflineODataProgressStep, _ named: [String: String]) -> [String] {
        (parameterNames[step] ?? []).map { named[$0] ?? "" }
    }
}

/// The name SAP's SDK gives the delegate protocol.
public typealias OfflineODataProviderDelegate = OfflineODataDelegate
/// The name SAP's SDK gives an operation's progress.
public typealias OfflineODataProviderOperationProgress = OfflineODataOperationProgress
/// The name SAP's SDK gives a progress step.
public typealias OfflineODataOperationStep = OfflineODataProgressStep

/// A request the backend rejected during upload (SPEC §7).
public struct OfflineODataFailedRequest: Sendable, Hashable {
    /// The backend's HTTP status (424 for a request not sent because one it depends on failed).
    public var httpStatus: Int
    /// The queue's request ID (also the ErrorArchive key).
    public var requestID: Int64
    /// The request's custom tag.
    public var customTag: String?
    /// The backend's error code.
    public var code: String
    /// The backend's error message.
    public var message: String
    /// The backend's inner error, as JSON text.
    public var innerError: String?
    /// Method, URL and body of the request as queued.
    public var method: String
    public var url: String
    public var body: String?
}

/// Events of a provider, for apps that prefer an `AsyncSequence` to the delegate.
public enum OfflineODataEvent: Sendable {
    case progress(OfflineODataProgress)
    case requestFailed(OfflineODataFailedRequest)
    /// A download found that the backend's `$metadata` changed, and migrated the store (SPEC §14).
    case metadataChanged(OfflineODataMetadataChange)
    /// An upload resolved a 412 or 428 without the ErrorArchive, by its conflict policy (SPEC §15).
    case conflictResolved(OfflineODataConflictResolved)
}

/// Receives progress and failures. Calls arrive on the provider's executor; do not block.
///
/// The provider holds its delegate **weakly**, as UIKit and SAP's SDK do with delegates: a view
/// controller that owns the provider and is its delegate makes no retain cycle. Keep a strong
/// reference to a delegate object yourself; one created inline (`delegate: Listener()`) is
/// released at once and receives nothing. ``OfflineODataProvider/events()`` needs no object.
///
/// Every method has a default that does nothing. SAP's shape — one method per operation with an
/// ``OfflineODataOperationProgress`` — and this package's — one method with the operation in the
/// ``OfflineODataProgress`` — are both called for every update; implement either.
public protocol OfflineODataDelegate: AnyObject, Sendable {
    /// A long operation moved to another step or reported bytes.
    func offlineODataProvider(didUpdate progress: OfflineODataProgress)
    /// The backend rejected a request during upload. The upload goes on.
    func offlineODataProvider(requestDidFail request: OfflineODataFailedRequest)
    /// SAP's shape: progress of ``OfflineODataProvider/open()``.
    func offlineODataProvider(
        _ provider: OfflineODataProvider, didUpdateOpenProgress progress: OfflineODataOperationProgress)
    /// SAP's shape: progress of ``OfflineODataProvider/download(definingQueries:)``.
    func offlineODataProvider(
        _ provider: OfflineODataProvider, didUpdateDownloadProgress progress: OfflineODataOperationProgress)
    /// SAP's shape: progress of ``OfflineODataProvider/upload(categories:)``.
    func offlineODataProvider(
        _ provider: OfflineODataProvider, didUpdateUploadProgress progress: OfflineODataOperationProgress)
    /// SAP's shape: progress of sending the store for support.
    func offlineODataProvider(
        _ provider: OfflineODataProvider, didUpdateSendStoreProgress progress: OfflineODataOperationProgress)
    /// SAP's shape: the backend rejected a request during upload (once per ErrorArchive row).
    func offlineODataProvider(_ provider: OfflineODataProvider, requestDidFail request: OfflineODataFailedRequest)
    /// A download found that the backend's `$metadata` changed and migrated the store: what
    /// changed, which defining queries were read again or left out, and which queued requests
    /// no longer fit (archived with code `MetadataChanged`). Called once, when the store
    /// follows the new `$metadata`.
    func offlineODataProvider(_ provider: OfflineODataProvider, didChangeMetadata change: OfflineODataMetadataChange)
    /// An upload resolved a conflict (412 or 428) by its policy instead of archiving it: sent
    /// again with the backend's ETag, merged, or dropped for the backend's copy.
    func offlineODataProvider(
        _ provider: OfflineODataProvider, didResolveConflict resolution: OfflineODataConflictResolved)
}

extension OfflineODataDelegate {
    /// Does nothing by default.
    public func offlineODataProvider(didUpdate progress: OfflineODataProgress) {}
    /// Does nothing by default.
    public func offlineODataProvider(requestDidFail request: OfflineODataFailedRequest) {}
    /// Does nothing by default.
    public func offlineODataProvider(
        _ provider: OfflineODataProvider, didUpdateOpenProgress progress: OfflineODataOperationProgress
    ) {}
    /// Does nothing by default.
    public func offlineODataProvider(
        _ provider: OfflineODataProvider, didUpdateDownloadProgress progress: OfflineODataOperationProgress
    ) {}
    /// Does nothing by default.
    public func offlineODataProvider(
        _ provider: OfflineODataProvider, didUpdateUploadProgress progress: OfflineODataOperationProgress
    ) {}
    /// Does nothing by default.
    public func offlineODataProvider(
        _ provider: OfflineODataProvider, didUpdateSendStoreProgress progress: OfflineODataOperationProgress
    ) {}
    /// Does nothing by default.
    public func offlineODataProvider(
        _ provider: OfflineODataProvider, requestDidFail request: OfflineODataFailedRequest
    ) {}
    /// Does nothing by default.
    public func offlineODataProvider(
        _ provider: OfflineODataProvider, didChangeMetadata change: OfflineODataMetadataChange
    ) {}
    /// Does nothing by default.
    public func offlineODataProvider(
        _ provider: OfflineODataProvider, didResolveConflict resolution: OfflineODataConflictResolved
    ) {}
}

/// Default progress messages in every supported language, kept as a resource.
public struct ProgressMessages: Sendable {
    struct Language: Decodable, Sendable {
        var format: String
        var steps: [String: String]
    }

    let languages: [String: Language]

    /// The shared catalogue from the bundled resource.
    public static let shared = ProgressMessages()

    init() {
        var loaded: [String: Language] = [:]
        if let url = Bundle.module.url(forResource: "progress-messages", withExtension: "json"),
            let data = try? Data(contentsOf: url),
            let decoded = try? JSONDecoder().decode([String: Language].self, from: data)
        {
            loaded = decoded
        }
        languages = loaded
    }

    /// Language codes with messages.
    public var availableLanguages: [String] { languages.keys.sorted() }

    /// The language to use for `locale`: exact (`zh-Hant`), then its language code, then English.
    public func language(for locale: Locale) -> String {
        let identifier = locale.identifier.replacingOccurrences(of: "_", with: "-")
        let code =
            locale.language.languageCode?.identifier ?? identifier.split(separator: "-").first.map(String.init) ?? "en"
        if code == "zh" {
            let script = locale.language.script?.identifier
            let region = locale.region?.identifier
            let traditional = script == "Hant" || (script == nil && ["TW", "HK", "MO"].contains(region ?? ""))
            return traditional ? "zh-Hant" : "zh-Hans"
        }
        if code == "nb" || code == "nn" { return languages["no"] != nil ? "no" : "en" }
        if languages[identifier] != nil { return identifier }
        return languages[code] != nil ? code : "en"
    }

    /// The message for a step in `language`, with the parameters filled in.
    public func message(
        step: OfflineODataProgressStep, number: Int, total: Int, parameters: [String: String], language: String
    ) -> String {
        let lang = languages[language] ?? languages["en"]
        var description = lang?.steps[step.rawValue] ?? languages["en"]?.steps[step.rawValue] ?? step.rawValue
        for (name, value) in parameters { description = description.replacingOccurrences(of: "{\(name)}", with: value) }
        // Unfilled optional parts disappear.
        while let open = description.range(of: "{"),
            let close = description.range(of: "}", range: open.upperBound..<description.endIndex)
        {
            description.removeSubrange(open.lowerBound..<close.upperBound)
        }
        description = description.trimmingCharacters(in: .whitespaces)
        let format = lang?.format ?? "Performing step {step} of {total} : {message}"
        return format.replacingOccurrences(of: "{step}", with: "\(number)").replacingOccurrences(
            of: "{total}", with: "\(total)"
        )
        .replacingOccurrences(of: "{message}", with: description)
    }
}

/// Numbers the steps of one operation and words its updates. A step met again (the next
/// defining query's pages, say) keeps the highest number reached: within an operation the
/// number never decreases and never exceeds the total (SPEC §8).
final class ProgressReporter: @unchecked Sendable {
    // `@unchecked Sendable`: `highest` is only touched under `lock`.
    let operation: OfflineODataOperation
    /// Every step the operation can pass through, in order.
    let plan: [OfflineODataProgressStep]
    let language: String
    private let lock = NSLock()
    private var highest = 0

    /// A reporter; `passed` steps are done already (an operation whose plan grew on the way
    /// goes on from the number it reached).
    init(operation: OfflineODataOperation, plan: [OfflineODataProgressStep], language: String, passed: Int = 0) {
        self.operation = operation
        self.plan = plan
        self.language = language
        self.highest = passed
    }

    /// The highest step number reported so far.
    var passed: Int { lock.withLock { highest } }

    func event(_ step: OfflineODataProgressStep, _ parameters: [String: String]) -> OfflineODataEvent {
        let planned = (plan.firstIndex(of: step) ?? plan.count - 1) + 1
        let number = lock.withLock {
            highest = max(highest, planned)
            return highest
        }
        return event(step, parameters, number: number)
    }

    /// A step the gateway reports while the device waits on one of its requests: shown under
    /// the step the device is at (its number neither moves nor goes back).
    func serverEvent(_ step: OfflineODataProgressStep, _ parameters: [String: String]) -> OfflineODataEvent {
        let number = lock.withLock { max(highest, 1) }
        return event(step, parameters, number: number)
    }

    private func event(_ step: OfflineODataProgressStep, _ parameters: [String: String], number: Int)
        -> OfflineODataEvent
    {
        let message = ProgressMessages.shared.message(
            step: step, number: number, total: plan.count, parameters: parameters, language: language)
        return .progress(
            OfflineODataProgress(
                operation: operation, step: step, stepNumber: number, totalSteps: plan.count, time: Date(),
                parameters: parameters, message: message))
    }
}
