{ test_threads — Pascal string and object workloads on many threads under
  ShoalMM: a worker pool, producers and consumers that free each other's
  strings, objects, lists and dynamic arrays (cross-thread frees), TThread
  objects, and thread churn. Checks contents, then that nothing leaked and
  that exited threads' heaps were reused. }
program test_threads;

{$mode objfpc}{$H+}

uses
  ShoalMM, {$ifdef unix} cthreads, {$endif} SysUtils, Classes, Contnrs;

{$i check.inc}

type
  TIntArray = array of LongInt;

  { What producers hand to consumers: every kind of managed and heap data. }
  TParcel = class
    Name: string;
    Numbers: TIntArray;
    Lines: TStringList;
    Items: TList;
    Sum: Int64;      { what the contents must add up to }
    destructor Destroy; override;
  end;

  TParcelQueue = record
    Lock: TRTLCriticalSection;
    Items: array of TParcel;
    Head, Tail: LongInt;       { ring: Head = next to pop, Tail = next to push }
    Closed: Boolean;
  end;

const
  QueueSize = 256;

var
  Queue: TParcelQueue;
  Failures: LongInt = 0;     { counted by threads, checked by the main thread }
  ConsumedSum, ProducedSum: Int64;
  ConsumedCount: LongInt = 0;

destructor TParcel.Destroy;
var
  i: Integer;
begin
  for i := 0 to Items.Count - 1 do
    FreeMem(Items[i]);
  Items.Free;
  Lines.Free;
  inherited Destroy;
end;

function MakeParcel(Seed: LongInt): TParcel;
var
  i, n: Integer;
  p: PLongInt;
begin
  Result := TParcel.Create;
  Result.Name := 'parcel-' + IntToStr(Seed);
  Result.Sum := Length(Result.Name);
  n := 1 + Seed mod 40;
  SetLength(Result.Numbers, n);
  for i := 0 to n - 1 do
  begin
    Result.Numbers[i] := Seed + i;
    Inc(Result.Sum, Seed + i);
  end;
  Result.Lines := TStringList.Create;
  for i := 1 to 1 + Seed mod 7 do
  begin
    Result.Lines.Add(StringOfChar('x', i * 3) + IntToStr(i));
    Inc(Result.Sum, Length(Result.Lines[Result.Lines.Count - 1]));
  end;
  Result.Items := TList.Create;
  for i := 1 to 1 + Seed mod 5 do
  begin
    p := GetMem(16 + (Seed mod 300));
    p^ := i;
    Result.Items.Add(p);
    Inc(Result.Sum, i);
  end;
end;

function ParcelSum(Parcel: TParcel): Int64;
var
  i: Integer;
begin
  Result := Length(Parcel.Name);
  for i := 0 to High(Parcel.Numbers) do
    Inc(Result, Parcel.Numbers[i]);
  for i := 0 to Parcel.Lines.Count - 1 do
    Inc(Result, Length(Parcel.Lines[i]));
  for i := 0 to Parcel.Items.Count - 1 do
    Inc(Result, PLongInt(Parcel.Items[i])^);
end;

{ ---- the queue (ring buffer under a critical section) ---- }

procedure QueueInit;
begin
  InitCriticalSection(Queue.Lock);
  SetLength(Queue.Items, QueueSize);
  Queue.Head := 0;
  Queue.Tail := 0;
  Queue.Closed := False;
end;

procedure QueuePush(Parcel: TParcel);
begin
  repeat
    EnterCriticalSection(Queue.Lock);
    if Queue.Tail - Queue.Head < QueueSize then
    begin
      Queue.Items[Queue.Tail mod QueueSize] := Parcel;
      Inc(Queue.Tail);
      LeaveCriticalSection(Queue.Lock);
      exit;
    end;
    LeaveCriticalSection(Queue.Lock);
    ThreadSwitch;
  until False;
end;

{ nil once the queue is closed and empty. }
function QueuePop: TParcel;
begin
  repeat
    EnterCriticalSection(Queue.Lock);
    if Queue.Head < Queue.Tail then
    begin
      Result := Queue.Items[Queue.Head mod QueueSize];
      Inc(Queue.Head);
      LeaveCriticalSection(Queue.Lock);
      exit;
    end;
    if Queue.Closed then
    begin
      LeaveCriticalSection(Queue.Lock);
      exit(nil);
    end;
    LeaveCriticalSection(Queue.Lock);
    ThreadSwitch;
  until False;
end;

{ ---- producers and consumers: every parcel is freed by another thread ---- }

const
  Producers = 4;
  Consumers = 4;
  ParcelsPerProducer = 3000;

function Producer(Arg: Pointer): PtrInt;
var
  i, Base: LongInt;
  Parcel: TParcel;
  Sum: Int64;
begin
  Base := LongInt(PtrUInt(Arg)) * 1000000;
  Sum := 0;
  for i := 1 to ParcelsPerProducer do
  begin
    Parcel := MakeParcel(Base + i);
    Inc(Sum, Parcel.Sum);
    QueuePush(Parcel);
  end;
  InterlockedExchangeAdd64(ProducedSum, Sum);
  Result := 0;
end;

function Consumer(Arg: Pointer): PtrInt;
var
  Parcel: TParcel;
  Sum: Int64;
  Count: LongInt;
begin
  Sum := 0;
  Count := 0;
  repeat
    Parcel := QueuePop;
    if Parcel = nil then
      break;
    if ParcelSum(Parcel) <> Parcel.Sum then
      InterlockedIncrement(Failures);
    Inc(Sum, Parcel.Sum);
    Inc(Count);
    Parcel.Free;
  until False;
  InterlockedExchangeAdd64(ConsumedSum, Sum);
  InterlockedExchangeAdd(ConsumedCount, Count);
  Result := 0;
end;

procedure TestProducersConsumers;
var
  Threads: array[0..Producers + Consumers - 1] of TThreadID;
  i: Integer;
begin
  QueueInit;
  ProducedSum := 0;
  ConsumedSum := 0;
  for i := 0 to Producers - 1 do
    Threads[i] := BeginThread(@Producer, Pointer(PtrInt(i + 1)));
  for i := 0 to Consumers - 1 do
    Threads[Producers + i] := BeginThread(@Consumer, nil);
  for i := 0 to Producers - 1 do
    WaitForThreadTerminate(Threads[i], 0);
  EnterCriticalSection(Queue.Lock);
  Queue.Closed := True;
  LeaveCriticalSection(Queue.Lock);
  for i := 0 to Consumers - 1 do
    WaitForThreadTerminate(Threads[Producers + i], 0);
  for i := 0 to High(Threads) do
    CloseThread(Threads[i]);
  Check(Failures = 0, Format('%d parcels arrived corrupted', [Failures]));
  Check(ConsumedCount = Producers * ParcelsPerProducer,
    Format('consumed %d parcels of %d', [ConsumedCount, Producers * ParcelsPerProducer]));
  Check(ConsumedSum = ProducedSum, 'consumers saw other contents than producers made');
  DoneCriticalSection(Queue.Lock);
  Queue.Items := nil;
end;

{ ---- a worker pool: tasks in a TObjectList, results freed by the main thread ---- }

type
  TTask = class
    Index: LongInt;
    Result: string;      { built by a worker, freed by the main thread }
    Objects: TObjectList;
    procedure Execute;
  end;

var
  Tasks: TObjectList;
  NextTask: LongInt;

procedure TTask.Execute;
var
  i: Integer;
  s: string;
  Words: TStringList;
  Arr: array of string;
begin
  Words := TStringList.Create;
  try
    for i := 1 to 200 do
      Words.Add(FloatToStr(Index * 1.25 + i));
    Words.Sort;
    SetLength(Arr, Words.Count);
    for i := 0 to Words.Count - 1 do
      Arr[i] := Words[i] + '/' + IntToStr(i);
    s := '';
    for i := 0 to High(Arr) do
      s := s + Copy(Arr[i], 1, 1);
    Result := IntToStr(Index) + ':' + s;
    for i := 1 to 50 do
      Objects.Add(TStringList.Create);   { freed with the task, by main }
  finally
    Words.Free;
  end;
end;

function PoolWorker(Arg: Pointer): PtrInt;
var
  i: LongInt;
begin
  repeat
    i := InterlockedIncrement(NextTask) - 1;
    if i >= Tasks.Count then
      break;
    TTask(Tasks[i]).Execute;
  until False;
  Result := 0;
end;

procedure TestWorkerPool;
const
  TaskCount = 400;
  Workers = 8;
var
  Threads: array[0..Workers - 1] of TThreadID;
  i: Integer;
  Task: TTask;
begin
  Tasks := TObjectList.Create(True);
  for i := 0 to TaskCount - 1 do
  begin
    Task := TTask.Create;
    Task.Index := i;
    Task.Objects := TObjectList.Create(True);
    Tasks.Add(Task);
  end;
  NextTask := 0;
  for i := 0 to Workers - 1 do
    Threads[i] := BeginThread(@PoolWorker, nil);
  for i := 0 to Workers - 1 do
  begin
    WaitForThreadTerminate(Threads[i], 0);
    CloseThread(Threads[i]);
  end;
  for i := 0 to TaskCount - 1 do
  begin
    Task := TTask(Tasks[i]);
    Check(Copy(Task.Result, 1, Length(IntToStr(i)) + 1) = IntToStr(i) + ':',
      Format('task %d result is "%s"', [i, Copy(Task.Result, 1, 20)]));
    Check(Length(Task.Result) = Length(IntToStr(i)) + 1 + 200, Format('task %d result has length %d', [i, Length(Task.Result)]));
    Check(Task.Objects.Count = 50, Format('task %d made %d objects', [i, Task.Objects.Count]));
    Task.Objects.Free;
  end;
  Tasks.Free;   { frees the tasks and their strings: all made on workers }
end;

{ ---- TThread objects ---- }

type
  TBuilder = class(TThread)
  public
    Output: TStringList;
    Seed: LongInt;
    procedure Execute; override;
  end;

procedure TBuilder.Execute;
var
  i: Integer;
  Parcel: TParcel;
begin
  for i := 1 to 300 do
  begin
    Parcel := MakeParcel(Seed + i);
    Output.AddObject(Parcel.Name, Parcel);
  end;
end;

procedure TestTThreads;
const
  Count = 6;
var
  Builders: array[0..Count - 1] of TBuilder;
  i, j: Integer;
  Parcel: TParcel;
begin
  for i := 0 to Count - 1 do
  begin
    Builders[i] := TBuilder.Create(True);
    Builders[i].Output := TStringList.Create;
    Builders[i].Seed := i * 1000;
    Builders[i].Start;
  end;
  for i := 0 to Count - 1 do
  begin
    Builders[i].WaitFor;
    Check(Builders[i].Output.Count = 300, 'a TThread built a short list');
    for j := 0 to Builders[i].Output.Count - 1 do
    begin
      Parcel := TParcel(Builders[i].Output.Objects[j]);
      Check(ParcelSum(Parcel) = Parcel.Sum, 'a TThread''s parcel is corrupted');
      Check(Builders[i].Output[j] = Parcel.Name, 'a TThread''s list string is corrupted');
      Parcel.Free;
    end;
    Builders[i].Output.Free;
    Builders[i].Free;
  end;
end;

{ ---- thread churn: many short threads, their results freed by main ---- }

var
  ChurnResults: array of string;
  ChurnObjects: array of TStringList;

function ChurnThread(Arg: Pointer): PtrInt;
var
  i, Index: LongInt;
  s: string;
  L: TStringList;
begin
  Index := PtrInt(Arg);
  s := '';
  for i := 1 to 100 do
    s := s + Chr(Ord('a') + (Index + i) mod 26);
  ChurnResults[Index] := s;
  L := TStringList.Create;
  for i := 1 to 20 do
    L.Add(IntToStr(Index * i));
  ChurnObjects[Index] := L;
  Result := 0;
end;

procedure TestThreadChurn;
const
  Rounds = 100;
  Width = 8;
var
  Threads: array[0..Width - 1] of TThreadID;
  r, i, Index: Integer;
  Before, After: TShoalStats;
begin
  SetLength(ChurnResults, Rounds * Width);
  SetLength(ChurnObjects, Rounds * Width);
  Before := ShoalStats;
  for r := 0 to Rounds - 1 do
  begin
    for i := 0 to Width - 1 do
      Threads[i] := BeginThread(@ChurnThread, Pointer(PtrInt(r * Width + i)));
    for i := 0 to Width - 1 do
    begin
      WaitForThreadTerminate(Threads[i], 0);
      CloseThread(Threads[i]);
    end;
    for i := 0 to Width - 1 do
    begin
      Index := r * Width + i;
      Check(Length(ChurnResults[Index]) = 100, 'a churned thread''s string has the wrong length');
      Check(ChurnObjects[Index].Count = 20, 'a churned thread''s list has the wrong count');
      Check(ChurnObjects[Index][19] = IntToStr(Index * 20), 'a churned thread''s list is corrupted');
      ChurnObjects[Index].Free;
      ChurnResults[Index] := '';
    end;
  end;
  After := ShoalStats;
  { 800 threads came and went, at most 8 at a time (+ main): exited
    threads' heaps must have been adopted, not made anew each time. }
  Check(After.Heaps - Before.Heaps <= 4 * Width,
    Format('%d heaps made for %d short threads, 8 at a time', [After.Heaps - Before.Heaps, Rounds * Width]));
  ChurnResults := nil;
  ChurnObjects := nil;
end;

var
  Start, Finish: TShoalStats;
begin
  Check(ShoalActive, 'ShoalMM did not install itself');
  Start := ShoalStats;
  TestProducersConsumers;
  TestWorkerPool;
  TestTThreads;
  TestThreadChurn;
  Finish := ShoalStats;
  Check(Finish.RemoteFrees > Start.RemoteFrees, 'no cross-thread frees were counted');
  { Everything the tests made is freed; allow a little for the RTL's own. }
  Check(Finish.LiveBlocks <= Start.LiveBlocks + 64,
    Format('live blocks went from %d to %d: a leak', [Start.LiveBlocks, Finish.LiveBlocks]));
  Writeln('ok ', ChecksRun, ' checks, ', Finish.RemoteFrees - Start.RemoteFrees,
    ' cross-thread frees, ', Finish.Heaps, ' heaps');
end.
