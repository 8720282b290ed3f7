"""Domain errors: the only exceptions pages catch and show to the user."""


class ChatError(Exception):
    """Base class of every error the app shows to a user."""


class SessionNotFound(ChatError):
    """No session with that id belongs to the signed-in user."""


class SessionChanged(ChatError):
    """The session kept changing under us (another tab sending); retries exhausted."""


class MessageNotPending(ChatError):
    """The turn was already finished or failed; the second writer lost."""


class VersionChanged(ChatError):
    """The turn's versions are not as the tab saw them (another tab regenerated or switched), or the turn is
    still being answered."""


class InvalidInstructions(ChatError):
    """Custom instructions over their length limit."""


class ModelNotOffered(ChatError):
    """A question asked for a model id that is not on the list this deployment offers (CHAT_MODELS)."""


class MessageNotFound(ChatError):
    """No message with that id in the user's session."""


class MessageTooLarge(ChatError):
    """The question would push the message item past DynamoDB's 400 KB item limit."""


class ItemTooLarge(ChatError):
    """DynamoDB refused an item over its 400 KB limit (the store turns it into MessageTooLarge for a turn)."""


class EmptyMessage(ChatError):
    """The question is empty or only whitespace."""


class TemporaryChat(ChatError):
    """Pinning or sharing a temporary chat: it is not kept, so it has no place in the sidebar or a link."""


class InvalidTitle(ChatError):
    """A session title must be 1 to 120 characters."""


class MemoryNotFound(ChatError):
    """The memory was deleted (perhaps in another tab)."""


class SummaryChanged(ChatError):
    """Another tab or replica wrote the running summary first; this result is dropped."""


class EmbedError(ChatError):
    """The embedding model could not be reached or refused the text: nothing was indexed or searched."""


class InvalidCursor(ChatError):
    """The page cursor was tampered with, expired, or belongs to another user or session."""


class StoreUnavailable(ChatError):
    """DynamoDB cannot be reached, throttled us past our retries, or the table is missing."""


class OutcomeUnknown(StoreUnavailable):
    """A write's response was lost (timeout, dropped connection, server error): it may or may not have been applied."""


class ObjectStoreUnavailable(StoreUnavailable):
    """The object store (S3, or the embedded store's folder) cannot be reached, throttled us past our retries, or
    its disk is full: nothing half-written is visible."""


class BodyUnavailable(ChatError):
    """A long question or answer kept in the object store is missing or damaged (checksum mismatch): never shown
    as empty text."""


class ConfigError(ChatError):
    """The configuration asks for something that cannot work; the message says what to set."""


class ModelError(ChatError):
    """The model call failed; the message is written for the user."""


class NotAuthenticated(ChatError):
    """No trusted identity came with the request."""


class GenerationLimit(ChatError):
    """Too many answers being written at once (per user or per process): nothing was committed."""


class ChatBusy(ChatError):
    """An answer in this chat (or of this turn) is still being written: nothing was committed."""


class EmptyQuestion(ChatError):
    """A question with no text: nothing was committed."""


class BranchNotAsked(ChatError):
    """A branch was made (its earlier turns copied) but its edited question was refused (`reason`, a ChatError);
    the page opens the branch (`session_id`) with the question kept in its box."""

    def __init__(self, session_id: str, reason: ChatError):
        super().__init__(f"The branch was made, but your edited question was not sent: {reason}")
        self.session_id, self.reason = session_id, reason


class ImportRefused(ChatError):
    """The file is not one the import command can import whole; nothing was written."""


class InvalidUserId(ChatError, ValueError):
    """A user id no key may be built from: empty, too long, or holding '#' or a control character."""


class TimeOutOfRange(ChatError):
    """A time the fixed-length key format cannot hold (past the year 9999): nothing was written."""


class NoSuchUser(ChatError):
    """No registry entry, chat, memory or usage bucket of that user id: nothing was changed."""


class AuditUnavailable(ChatError):
    """The audit record of an admin action could not be written, so the action was refused before it acted."""


class NotAdmin(ChatError):
    """An admin-only page or action was asked for by someone not in CHAT_ADMINS."""


class SpendLimitReached(ChatError):
    """The answer could pass the user's daily or monthly spend limit (docs/limits.md): nothing was committed."""


class InvalidLimit(ChatError):
    """A spend limit an admin entered is not a number of dollars from 0 to 1,000,000, or names no valid scope."""


class ShareNotFound(ChatError):
    """A share token that names no live link: unknown, malformed, guessed, revoked, of another deployment, or of a
    chat (or an owner) deleted since; one message for all, so none tells the others apart."""


class SharingOff(ChatError):
    """CHAT_SHARING=off: no link is created, and existing links show nothing."""


class ShareTooLarge(ChatError):
    """The chat's text is more than one share link can hold (DynamoDB's 4 MB transaction limit)."""


class LinkNotFound(ChatError):
    """A link id that is not one of the caller's own links (a forged id, or one deleted with its chat)."""


class ProjectNotFound(ChatError):
    """No project with that id belongs to the signed-in user (a forged, malformed or another user's id)."""


class InvalidProject(ChatError):
    """A project name must be 1 to 80 characters of plain text and its instructions at most 4,000."""


class ArchiveUnavailable(ChatError):
    """An archived chat's object is missing, damaged (checksum mismatch) or cannot be read now: the chat stays
    archived and nothing is deleted."""


class AttachmentRefused(ChatError):
    """A file attached to a question was refused (too large, too many, a type this app does not read, an
    encrypted or malformed PDF, a compressed bomb): nothing was stored and the typed question is kept."""
